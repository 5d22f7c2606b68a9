"""The same S3 session, operation by operation, with boto3 against ENDPOINT:
tests/services/s3_transparency.rs runs it against moto directly and through
fencegate (--allow-unfenced-writes) and compares what each operation got.

Every operation's outcome is recorded as the status, the S3 error code if any,
and the response fields that do not change from one run to the next (ETags,
lengths, keys, ranges, metadata, checksums; not dates or request ids).

Usage: boto3_transparency.py ENDPOINT BUCKET
Prints one JSON object: {operation: outcome}.
"""

import base64
import hashlib
import json
import sys

import boto3
import botocore.config
from botocore.exceptions import ClientError

STABLE = (
    "ETag",
    "ContentLength",
    "ContentType",
    "ContentRange",
    "Metadata",
    "KeyCount",
    "IsTruncated",
    "ChecksumCRC32",
    "ChecksumSHA256",
    "VersionId",
    "DeleteMarker",
    "AcceptRanges",
    "CacheControl",
    "ContentDisposition",
    "ContentEncoding",
    "ContentLanguage",
)


def client(endpoint):
    config = botocore.config.Config(
        s3={"addressing_style": "path"}, retries={"max_attempts": 1}
    )
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        config=config,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )


def outcome(call):
    try:
        response = call()
    except ClientError as error:
        meta = error.response.get("ResponseMetadata", {})
        return {
            "status": meta.get("HTTPStatusCode"),
            "error": error.response.get("Error", {}).get("Code"),
        }
    result = {"status": response["ResponseMetadata"]["HTTPStatusCode"]}
    for field in STABLE:
        if field in response:
            result[field] = response[field]
    if "Body" in response:
        body = response["Body"].read()
        result["body_sha256"] = hashlib.sha256(body).hexdigest()
        result["body_len"] = len(body)
    for listed in ("Contents", "Deleted", "Errors", "Parts", "CommonPrefixes"):
        if listed in response:
            result[listed] = [
                {k: v for k, v in item.items() if k not in ("LastModified", "Owner")}
                for item in response[listed]
            ]
    return result


def main():
    endpoint, bucket = sys.argv[1], sys.argv[2]
    s3 = client(endpoint)
    body = b"fencegate transparency " * 100
    md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
    results = {}
    steps = [
        ("create_bucket", lambda: s3.create_bucket(Bucket=bucket)),
        ("put", lambda: s3.put_object(Bucket=bucket, Key="a/one.txt", Body=body,
                                      ContentType="text/plain", Metadata={"k": "v"})),
        ("put_md5", lambda: s3.put_object(Bucket=bucket, Key="a/two.txt", Body=body, ContentMD5=md5)),
        # moto does not check Content-MD5 (it answers 200); kept, so that a
        # store that does would show a difference too.
        ("put_bad_md5", lambda: s3.put_object(Bucket=bucket, Key="a/bad.txt", Body=body,
                                              ContentMD5=base64.b64encode(b"0" * 16).decode())),
        ("put_checksum", lambda: s3.put_object(Bucket=bucket, Key="a/sum.txt", Body=body,
                                               ChecksumAlgorithm="SHA256")),
        ("put_empty", lambda: s3.put_object(Bucket=bucket, Key="a/empty", Body=b"")),
        ("put_odd_key", lambda: s3.put_object(Bucket=bucket, Key="a/sp ace+plus%25/é", Body=b"x")),
        ("get", lambda: s3.get_object(Bucket=bucket, Key="a/one.txt")),
        ("get_odd_key", lambda: s3.get_object(Bucket=bucket, Key="a/sp ace+plus%25/é")),
        ("get_range", lambda: s3.get_object(Bucket=bucket, Key="a/one.txt", Range="bytes=10-29")),
        ("get_missing", lambda: s3.get_object(Bucket=bucket, Key="a/missing")),
        ("head", lambda: s3.head_object(Bucket=bucket, Key="a/one.txt")),
        ("head_missing", lambda: s3.head_object(Bucket=bucket, Key="a/missing")),
        ("get_if_none_match", lambda: s3.get_object(
            Bucket=bucket, Key="a/one.txt",
            IfNoneMatch=s3.head_object(Bucket=bucket, Key="a/one.txt")["ETag"])),
        ("get_if_match_wrong", lambda: s3.get_object(Bucket=bucket, Key="a/one.txt", IfMatch='"nope"')),
        ("copy", lambda: s3.copy_object(Bucket=bucket, Key="b/copy.txt",
                                        CopySource={"Bucket": bucket, "Key": "a/one.txt"})),
        ("list", lambda: s3.list_objects_v2(Bucket=bucket)),
        ("list_prefix", lambda: s3.list_objects_v2(Bucket=bucket, Prefix="a/", Delimiter="/", MaxKeys=2)),
        ("delete_objects", lambda: s3.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": "a/two.txt"}, {"Key": "a/none"}]})),
        ("delete", lambda: s3.delete_object(Bucket=bucket, Key="b/copy.txt")),
        ("list_after", lambda: s3.list_objects_v2(Bucket=bucket)),
        ("missing_bucket", lambda: s3.list_objects_v2(Bucket=bucket + "-none")),
    ]
    for name, call in steps:
        results[name] = outcome(call)
    # A multipart upload of two parts.
    upload = s3.create_multipart_upload(Bucket=bucket, Key="m/big")
    part = b"p" * (5 * 1024 * 1024)
    etags = []
    for number, data in ((1, part), (2, b"tail")):
        etags.append(s3.upload_part(Bucket=bucket, Key="m/big", UploadId=upload["UploadId"],
                                    PartNumber=number, Body=data)["ETag"])
    results["multipart_parts"] = etags
    results["multipart_complete"] = outcome(lambda: s3.complete_multipart_upload(
        Bucket=bucket, Key="m/big", UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": i + 1, "ETag": e} for i, e in enumerate(etags)]}))
    results["multipart_get"] = outcome(lambda: s3.get_object(Bucket=bucket, Key="m/big"))
    print(json.dumps(results, sort_keys=True, default=str))


if __name__ == "__main__":
    main()
