"""A boto3 (SigV4) lock holder writing through fencegate with
`--conditional-writes s3`, as docs/CLIENTS.md's recipe says and
tests/services/chained_writes.rs runs it: the token travels in X-Fencing-Token (a
before-sign hook); before its first write of an object the holder sends a
fenced HEAD (head_object; a 404 is fine: absent is a version); a 409
`version_conflict` with `retry: true` is answered by a HEAD and the same
write again; `retry: false` means the lock has moved on.

Usage: boto3_chained.py GATEWAY_URL MOTO_URL BUCKET
Prints one JSON object with what happened; the Rust test checks it.
"""

import json
import sys

import boto3
import botocore.config
from botocore.exceptions import ClientError


class TokenHolder:
    """The current lock holder's fencing token."""

    def __init__(self):
        self.token = None

    def sign_hook(self, request, **_):
        if self.token is not None:
            request.headers["X-Fencing-Token"] = str(self.token)


def client(endpoint):
    config = botocore.config.Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1})
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        config=config,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )


def learn_version(s3, bucket, key):
    """A fenced HEAD: the gateway learns the object's version (absent too)."""
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except ClientError as error:
        if error.response["ResponseMetadata"]["HTTPStatusCode"] != 404:
            raise


class LastBody:
    """The raw body of the last answer: fencegate's refusals are JSON, which
    botocore's S3 error parser (XML) does not read."""

    def __init__(self):
        self.body = b""

    def hook(self, http_response, **_):
        self.body = http_response.content

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            return {}


def chained_put(s3, last, bucket, key, body, log):
    """One write, with the recipe's answers: 428 version_unknown and 409
    version_conflict with retry true call for a fenced HEAD and the same
    write again; anything else (stale_token, retry false) is final."""
    for _ in range(3):
        try:
            s3.put_object(Bucket=bucket, Key=key, Body=body)
            log.append("put")
            return True
        except ClientError as error:
            answer = last.json()
            code = answer.get("error", str(error.response["ResponseMetadata"]["HTTPStatusCode"]))
            log.append(code)
            if code == "version_unknown" or (code == "version_conflict" and answer.get("retry")):
                learn_version(s3, bucket, key)
                continue
            return False
    return False


def main():
    gateway, moto, bucket = sys.argv[1], sys.argv[2], sys.argv[3]
    holder = TokenHolder()
    s3 = client(gateway)
    s3.meta.events.register("before-sign.s3.*", holder.sign_hook)
    last = LastBody()
    s3.meta.events.register("after-call.s3.*", last.hook)
    direct = client(moto)
    result = {}

    holder.token = 1
    direct.create_bucket(Bucket=bucket)
    holder.token = 40
    log = []
    # Without a HEAD first: the recipe handles the 428 itself.
    result["first"] = chained_put(s3, last, bucket, "report", b"v1", log)
    for n in range(2, 6):
        result[f"write_{n}"] = chained_put(s3, last, bucket, "report", f"v{n}".encode(), log)
    # Someone writes behind the gateway's back: a conflict, then a retry.
    direct.put_object(Bucket=bucket, Key="report", Body=b"behind")
    result["after_behind"] = chained_put(s3, last, bucket, "report", b"v6", log)
    result["log"] = log
    result["stored"] = direct.get_object(Bucket=bucket, Key="report")["Body"].read().decode()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
