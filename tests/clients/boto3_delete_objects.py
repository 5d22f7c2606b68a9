"""A boto3 (SigV4) client deleting several objects at once (S3 DeleteObjects,
`POST /bucket?delete`) through fencegate, as tests/services/beyond_path.rs runs it.
The fencing token travels in X-Fencing-Token, added by a before-sign hook
(as in boto3_fenced.py). What the store holds is read from moto directly,
never through the gateway.

Usage: boto3_delete_objects.py GATEWAY_URL MOTO_URL BUCKET
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


def status_of(call):
    """The HTTP status of a call: 200 on success, the error's otherwise."""
    try:
        response = call()
        return response["ResponseMetadata"]["HTTPStatusCode"], response
    except ClientError as error:
        return error.response["ResponseMetadata"]["HTTPStatusCode"], None


def main():
    gateway, moto, bucket = sys.argv[1], sys.argv[2], sys.argv[3]
    holder = TokenHolder()
    s3 = client(gateway)
    s3.meta.events.register("before-sign.s3.*", holder.sign_hook)
    direct = client(moto)
    keys = ["obj", "dir/two", "three"]
    result = {}

    def stored(key):
        try:
            return direct.get_object(Bucket=bucket, Key=key)["Body"].read().decode()
        except ClientError as error:
            return error.response["Error"]["Code"]

    holder.token = 1
    s3.create_bucket(Bucket=bucket)

    # Client 2 holds the lock with token 34 and writes three objects.
    holder.token = 34
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=f"{key} written at 34".encode())

    # Client 1 wakes up with token 33: its write is refused...
    holder.token = 33
    result["stale_put"], _ = status_of(
        lambda: s3.put_object(Bucket=bucket, Key="obj", Body=b"written at 33")
    )
    # ...and so is its delete of the same object by DeleteObjects.
    result["stale_delete_objects"], _ = status_of(
        lambda: s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "obj"}]})
    )
    result["after_stale"] = {key: stored(key) for key in keys}

    # Client 3 holds the lock with token 35: its DeleteObjects goes through.
    holder.token = 35
    status, response = status_of(
        lambda: s3.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": key} for key in keys]}
        )
    )
    result["current_delete_objects"] = status
    if response is not None:
        result["deleted"] = sorted(d["Key"] for d in response.get("Deleted", []))
        result["errors"] = response.get("Errors", [])
    listing = direct.list_objects_v2(Bucket=bucket)
    result["left"] = sorted(o["Key"] for o in listing.get("Contents", []))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
