"""The Azure SDK for Python (azure-storage-blob), unmodified but for the
token header, through fencegate holding the store's account key
(`--store azure --upstream-credentials`), as tests/services/azure_custody.rs
runs it against Azurite, which knows only the store's account.

Each client signs with an identity's account name and key, addresses the
gateway at `http://GATEWAY/<identity account>` (path style), and puts the
token in `x-ms-fencing-token` through its `raw_request_hook`, which the SDK
runs before it signs: a Shared Key signature covers `x-ms-*` headers only.

Usage: azure_custody.py GATEWAY_URL AZURITE_URL STORE_ACCOUNT BILLING_KEY OPS_KEY
Prints one JSON object with what happened; the Rust test checks it.
"""

import datetime
import json
import sys

from azure.core.exceptions import HttpResponseError
from azure.storage.blob import (
    BlobClient,
    BlobSasPermissions,
    BlobServiceClient,
    generate_blob_sas,
)


class FencingToken:
    """Adds x-ms-fencing-token to every request of the client it is given
    to while `token` is set."""

    def __init__(self, token=None):
        self.token = token

    def __call__(self, request):
        if self.token is not None:
            request.http_request.headers["x-ms-fencing-token"] = str(self.token)


def outcome(call):
    """"ok" (or what the call returned, for reads), else
    "<status> <error_code>"."""
    try:
        value = call()
        if isinstance(value, bytes):
            return value.decode()
        if isinstance(value, (list, str)):
            return value
        return "ok"
    except HttpResponseError as error:
        code = getattr(error.error_code, "value", error.error_code)
        return f"{error.status_code} {code}"


def main():
    gateway, azurite, store, billing_key, ops_key = sys.argv[1:6]
    result = {}

    # The identity's key goes nowhere at the store: its account is unknown
    # there, and the store's account does not take its key.
    for name, account in [("direct_own_account", "fgbilling"), ("direct_store_account", store)]:
        direct = BlobServiceClient(
            f"{azurite}/{account}",
            credential={"account_name": account, "account_key": billing_key},
            retry_total=0,
        )
        result[name] = outcome(lambda: direct.get_container_client("billing").create_container())

    ops_token = FencingToken(1)
    ops = BlobServiceClient(
        f"{gateway}/fgops",
        credential={"account_name": "fgops", "account_key": ops_key},
        raw_request_hook=ops_token,
        retry_total=0,
    )
    result["create"] = [
        outcome(lambda: ops.get_container_client(name).create_container())
        for name in ("billing", "shared")
    ]
    ops_token.token = None

    token = FencingToken()
    billing = BlobServiceClient(
        f"{gateway}/fgbilling",
        credential={"account_name": "fgbilling", "account_key": billing_key},
        raw_request_hook=token,
        retry_total=0,
        max_single_put_size=4 * 1024,
        max_block_size=4 * 1024,
        max_chunk_get_size=4 * 1024,
        max_single_get_size=4 * 1024,
    )
    container = billing.get_container_client("billing")

    token.token = 5
    result["upload"] = outcome(lambda: container.upload_blob("report", b"v5", overwrite=True))
    result["overwrite"] = outcome(lambda: container.upload_blob("report", b"v5b", overwrite=True))
    big = bytes(range(256)) * 80  # 20 KiB: five staged blocks and a block list
    result["staged"] = outcome(lambda: container.upload_blob("big", big, overwrite=True))
    # Reads without the token: a listing of the container would otherwise
    # raise the container's fence, which billing may not write.
    token.token = None
    result["download"] = outcome(lambda: container.download_blob("report").readall())
    result["download_ranges"] = outcome(
        lambda: container.download_blob("big").readall() == big and "same" or "different"
    )
    result["list"] = outcome(lambda: [b.name for b in container.list_blobs()])

    token.token = 4
    try:
        container.upload_blob("report", b"stale", overwrite=True)
        result["stale"] = {"status": 200}
    except HttpResponseError as error:
        result["stale"] = {
            "status": error.status_code,
            "error_code": error.error_code,
            "message": error.message.splitlines()[0],
        }

    token.token = 6
    result["forbidden"] = outcome(
        lambda: billing.get_container_client("shared").upload_blob("x", b"no", overwrite=True)
    )
    result["copy"] = outcome(
        lambda: container.get_blob_client("copy").start_copy_from_url(
            f"{gateway}/fgbilling/billing/report"
        )
    )
    token.token = None
    result["copied"] = outcome(lambda: container.download_blob("copy").readall())

    # A SAS the SDK made with the identity's key.
    sas = generate_blob_sas(
        "fgbilling",
        "billing",
        "by-sas",
        account_key=billing_key,
        permission=BlobSasPermissions(read=True, write=True, delete=True),
        expiry=datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1),
    )
    sas_token = FencingToken(7)
    by_sas = BlobClient.from_blob_url(
        f"{gateway}/fgbilling/billing/by-sas?{sas}", raw_request_hook=sas_token, retry_total=0
    )
    result["sas_upload"] = outcome(lambda: by_sas.upload_blob(b"by sas", overwrite=True))
    sas_token.token = None
    result["sas_download"] = outcome(lambda: by_sas.download_blob().readall())
    sas_token.token = 8
    result["sas_delete"] = outcome(by_sas.delete_blob)

    token.token = 9
    result["delete"] = outcome(lambda: container.delete_blob("big"))
    token.token = None
    result["listed_after"] = outcome(lambda: [b.name for b in container.list_blobs()])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
