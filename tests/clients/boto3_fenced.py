"""A boto3 (SigV4) client writing to S3 through fencegate, as
tests/services/s3_boto3.rs runs it. The fencing token travels in X-Fencing-Token,
added by a before-sign hook so that it is signed with the request. The token
lives in a holder object, not a contextvar: upload_file runs in threads.

Usage: boto3_fenced.py GATEWAY_URL MODE
  MODE endpoint: the gateway is the S3 endpoint (the client signs for its host)
  MODE proxy:    the gateway is the HTTP proxy of http://s3.us-east-1.amazonaws.com
                 (the client signs for the real endpoint's host; the gateway
                 carries the request to its --upstream over TLS)
  MODE virtual:  as proxy, in the SDK's default virtual-hosted style
                 (bucket.s3.us-east-1.amazonaws.com/key; the gateway runs with
                 --scope host+path, so each bucket has its own fences)
Prints one JSON object with what happened; exits 0 if every step went as
fencing says it must.
"""

import contextvars
import json
import sys
import tempfile

import boto3
import botocore.config
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError


class TokenHolder:
    """The current lock holder's fencing token."""

    def __init__(self):
        self.token = None

    def sign_hook(self, request, **_):
        if self.token is not None:
            request.headers["X-Fencing-Token"] = str(self.token)


# The pattern docs/CLIENTS.md warns against: upload_file sends the parts of
# a multipart upload from a thread pool, whose threads do not see the
# caller's context, so those parts go out without the token.
CONTEXT_TOKEN = contextvars.ContextVar("fencing_token", default=None)


def contextvar_hook(request, **_):
    token = CONTEXT_TOKEN.get()
    if token is not None:
        request.headers["X-Fencing-Token"] = str(token)


def multipart_upload(s3, bucket, key):
    """upload_file of 12 MiB in 5 MiB parts, 4 threads: "ok" or the error."""
    mib = 1024 * 1024
    config = TransferConfig(
        multipart_threshold=5 * mib, multipart_chunksize=5 * mib, max_concurrency=4, use_threads=True
    )
    with tempfile.NamedTemporaryFile() as file:
        file.write(b"x" * (12 * mib))
        file.flush()
        try:
            s3.upload_file(file.name, bucket, key, Config=config)
            return "ok"
        except Exception as error:  # S3UploadFailedError wraps the part's ClientError
            return f"failed: {error}"


def client(gateway, mode, holder):
    common = dict(
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    if mode == "endpoint":
        config = botocore.config.Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1})
        s3 = boto3.client("s3", endpoint_url=gateway, config=config, **common)
    else:
        config = botocore.config.Config(
            s3={"addressing_style": "virtual" if mode == "virtual" else "path"},
            proxies={"http": gateway},
            retries={"max_attempts": 1},
        )
        s3 = boto3.client("s3", endpoint_url="http://s3.us-east-1.amazonaws.com", config=config, **common)
    if holder is not None:
        s3.meta.events.register("before-sign.s3.*", holder.sign_hook)
    else:
        s3.meta.events.register("before-sign.s3.*", contextvar_hook)
    return s3


def main():
    gateway, mode = sys.argv[1], sys.argv[2]
    bucket = f"fenced-{mode}"
    holder = TokenHolder()
    s3 = client(gateway, mode, holder)
    result = {"mode": mode}

    holder.token = 1
    s3.create_bucket(Bucket=bucket)

    # Client 2 holds the lock with token 34 and writes.
    holder.token = 34
    s3.put_object(Bucket=bucket, Key="report.csv", Body=b"written by client 2")

    # A multipart upload in threads: every part carries the holder's token.
    result["multipart_holder"] = multipart_upload(s3, bucket, "big-holder.bin")
    # The same through a contextvar: the parts sent from worker threads lack it.
    CONTEXT_TOKEN.set(34)
    result["multipart_contextvar"] = multipart_upload(client(gateway, mode, None), bucket, "big-context.bin")
    CONTEXT_TOKEN.set(None)

    # Client 1 wakes up from its pause with token 33 and writes: refused.
    holder.token = 33
    try:
        s3.put_object(Bucket=bucket, Key="report.csv", Body=b"written by client 1")
        result["stale_write"] = "accepted"
    except ClientError as error:
        result["stale_write"] = error.response["ResponseMetadata"]["HTTPStatusCode"]

    if mode == "virtual":
        # Another bucket's object of the same key, by another lock whose
        # tokens are lower: a fence of its own.
        other = f"{bucket}-b"
        holder.token = 1
        s3.create_bucket(Bucket=other)
        holder.token = 5
        try:
            s3.put_object(Bucket=other, Key="report.csv", Body=b"bucket b")
            result["other_bucket"] = "accepted"
        except ClientError as error:
            result["other_bucket"] = error.response["ResponseMetadata"]["HTTPStatusCode"]

    holder.token = None
    body = s3.get_object(Bucket=bucket, Key="report.csv")["Body"].read().decode()
    result["stored"] = body
    print(json.dumps(result))
    ok = (
        result["stale_write"] == 409
        and body == "written by client 2"
        and result["multipart_holder"] == "ok"
        and ("428" in result["multipart_contextvar"] or "(missing_token)" in result["multipart_contextvar"])
    )
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
