"""boto3 (through the gateway to moto's S3 server) and the Azure SDK (to
Azurite): the token signed with each request, the gateway's refusals read as
the kit's exceptions, presigned URLs without the token, and chained-write
retries."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
import requests

from fencegate_client import (
    AzureFencingPolicy,
    MissingToken,
    StaleToken,
    TokenHolder,
    VersionConflict,
    VersionUnknown,
    fence_boto3,
    fencing_error,
    presigned_url,
    raise_for_fencing,
    retry_chained,
)

from .conftest import AZURITE_ACCOUNT, AZURITE_KEY


def s3_client(endpoint: str) -> Any:
    import boto3
    import botocore.config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
        config=botocore.config.Config(
            signature_version="s3v4", s3={"addressing_style": "path"}, retries={"max_attempts": 1}
        ),
    )


def test_boto3_token_is_signed_and_stale_writes_raise(moto_url: str, gateway: Callable[..., Any]) -> None:
    from botocore.exceptions import ClientError

    s3_client(moto_url).create_bucket(Bucket="signed")
    gw = gateway("--upstream", moto_url, "--store", "s3")
    s3 = s3_client(gw.url)
    holder = TokenHolder(5)
    fence_boto3(s3, holder)
    sent: list[str] = []
    s3.meta.events.register("before-send.s3.*", lambda request, **_: sent.append(request.headers["Authorization"].decode()))

    s3.put_object(Bucket="signed", Key="k", Body=b"five")
    signed = re.search(r"SignedHeaders=([^,]+)", sent[-1])
    assert signed and "x-fencing-token" in signed.group(1).split(";"), sent[-1]

    holder.token = 4
    with pytest.raises(ClientError) as raised:
        s3.put_object(Bucket="signed", Key="k", Body=b"four")
    error = fencing_error(raised.value)
    assert isinstance(error, StaleToken)
    assert (error.token, error.highest, error.resource) == (4, 5, "/signed/k")
    with pytest.raises(StaleToken):
        raise_for_fencing(raised.value)

    holder.token = None
    with pytest.raises(ClientError) as raised:
        s3.delete_object(Bucket="signed", Key="k")
    assert isinstance(fencing_error(raised.value), MissingToken)
    assert s3_client(moto_url).get_object(Bucket="signed", Key="k")["Body"].read() == b"five"

    # A presigned GET: SigV4, no token among its signed headers, and it reads
    # through the gateway (an unfenced read) though the client has the hook.
    holder.token = 6
    url = presigned_url(s3, "get_object", {"Bucket": "signed", "Key": "k"}, expires_in=300)
    query = parse_qs(urlparse(url).query)
    assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    assert "x-fencing-token" not in query["X-Amz-SignedHeaders"][0]
    assert requests.get(url, timeout=10).content == b"five"


def test_boto3_json_answers_still_read_as_stale(moto_url: str, gateway: Callable[..., Any]) -> None:
    """Without --store s3 the gateway answers JSON, which botocore cannot
    read; the status and X-Fencing-Highest still make a StaleToken."""
    from botocore.exceptions import ClientError

    s3_client(moto_url).create_bucket(Bucket="jsonish")
    gw = gateway("--upstream", moto_url, "--flat-keys")
    s3 = s3_client(gw.url)
    holder = TokenHolder(9)
    fence_boto3(s3, holder)
    s3.put_object(Bucket="jsonish", Key="k", Body=b"nine")
    holder.token = 8
    with pytest.raises(ClientError) as raised:
        s3.put_object(Bucket="jsonish", Key="k", Body=b"eight")
    error = fencing_error(raised.value)
    assert isinstance(error, StaleToken) and error.highest == 9


def test_retry_chained_retries_conflicts_and_never_stale(moto_url: str, gateway: Callable[..., Any]) -> None:
    from botocore.exceptions import ClientError

    direct = s3_client(moto_url)
    direct.create_bucket(Bucket="chained")
    gw = gateway("--upstream", moto_url, "--store", "s3", "--conditional-writes", "s3", "--chain-observe", "client-head")
    s3 = s3_client(gw.url)
    holder = TokenHolder(10)
    fence_boto3(s3, holder)
    heads: list[int] = []

    def head() -> None:
        heads.append(1)
        try:
            s3.head_object(Bucket="chained", Key="obj")
        except ClientError as error:
            if error.response["ResponseMetadata"]["HTTPStatusCode"] != 404:
                raise

    def put(body: bytes) -> Callable[[], Any]:
        return lambda: s3.put_object(Bucket="chained", Key="obj", Body=body)

    # version_unknown: the first write of an unseen object needs a fenced HEAD.
    with pytest.raises(ClientError) as raised:
        put(b"v0")()
    assert isinstance(fencing_error(raised.value), VersionUnknown)
    retry_chained(put(b"v1"), head)
    assert len(heads) == 1
    retry_chained(put(b"v2"), head)  # the chain is known: no HEAD
    assert len(heads) == 1

    # Behind the gateway's back: version_conflict, retry true; HEAD, write again.
    direct.put_object(Bucket="chained", Key="obj", Body=b"unfenced")
    with pytest.raises(ClientError) as raised:
        put(b"v3")()
    conflict = fencing_error(raised.value)
    assert isinstance(conflict, VersionConflict) and conflict.retry is True
    retry_chained(put(b"v4"), head)
    assert direct.get_object(Bucket="chained", Key="obj")["Body"].read() == b"v4"

    # A stale token is never retried: no HEAD, StaleToken raised.
    before = len(heads)
    holder.token = 9
    with pytest.raises(StaleToken):
        retry_chained(put(b"stale"), head, attempts=5)
    assert len(heads) == before
    assert direct.get_object(Bucket="chained", Key="obj")["Body"].read() == b"v4"


def test_azure_policy_signs_the_token_and_errors_read(azurite_url: str, gateway: Callable[..., Any]) -> None:
    from azure.core.exceptions import HttpResponseError
    from azure.storage.blob import BlobServiceClient

    gw = gateway("--upstream", azurite_url, "--store", "azure", "--token-header", "x-ms-fencing-token")
    holder = TokenHolder(5)
    policy = AzureFencingPolicy(holder)
    blobs = BlobServiceClient(
        f"{gw.url}/{AZURITE_ACCOUNT}",
        credential={"account_name": AZURITE_ACCOUNT, "account_key": AZURITE_KEY},
        raw_request_hook=policy,
        retry_total=0,
    )
    blobs.create_container("reports")
    blob = blobs.get_blob_client("reports", "q3.csv")
    blob.upload_blob(b"five", overwrite=True)  # SharedKey signed x-ms-fencing-token: Azurite accepted it

    holder.token = 4
    with pytest.raises(HttpResponseError) as raised:
        blob.upload_blob(b"four", overwrite=True)
    assert raised.value.error_code == "stale_token"
    error = fencing_error(raised.value)
    assert isinstance(error, StaleToken)
    assert (error.token, error.highest) == (4, 5)
    assert error.resource == f"/{AZURITE_ACCOUNT}/reports/q3.csv"
    holder.token = None  # a fenced read with a stale token is refused too
    assert blob.download_blob().readall() == b"five"
