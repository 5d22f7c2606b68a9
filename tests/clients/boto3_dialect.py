"""What a stock boto3 shows of the gateway's refusals under --store s3, as
tests/services/s3_custody.rs runs it: S3 error documents whose Code is the
SPEC's error name and whose Message names token and highest.

Usage: boto3_dialect.py GATEWAY_URL BUCKET
Prints one JSON object with what each call raised.
"""

import json
import sys

import boto3
import botocore.config
from botocore.exceptions import ClientError


def main():
    url, bucket = sys.argv[1], sys.argv[2]
    token = {"value": None}

    def add_token(request, **_):
        if token["value"] is not None:
            request.headers["X-Fencing-Token"] = str(token["value"])

    s3 = boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=botocore.config.Config(
            s3={"addressing_style": "path"}, retries={"max_attempts": 1}
        ),
    )
    s3.meta.events.register("before-sign.s3.*", add_token)
    token["value"] = 1
    s3.create_bucket(Bucket=bucket)
    out = {}

    def refused(call):
        try:
            call()
            return {"raised": None}
        except ClientError as error:
            response = error.response
            return {
                "code": response["Error"].get("Code"),
                "message": response["Error"].get("Message"),
                "status": response["ResponseMetadata"]["HTTPStatusCode"],
                "highest": response["ResponseMetadata"]["HTTPHeaders"].get("x-fencing-highest"),
                "request_id": response["ResponseMetadata"].get("RequestId"),
            }

    token["value"] = 34
    s3.put_object(Bucket=bucket, Key="report.csv", Body=b"written by client 2")
    token["value"] = 33
    out["stale"] = refused(lambda: s3.put_object(Bucket=bucket, Key="report.csv", Body=b"late"))
    token["value"] = None
    out["missing"] = refused(lambda: s3.put_object(Bucket=bucket, Key="other.csv", Body=b"x"))
    token["value"] = "0x10"
    out["invalid"] = refused(lambda: s3.put_object(Bucket=bucket, Key="other.csv", Body=b"x"))
    token["value"] = None
    out["stored"] = s3.get_object(Bucket=bucket, Key="report.csv")["Body"].read().decode()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
