"""A boto3 (SigV4) client working on a VERSIONED bucket, run once directly
against moto's S3 server and once through fencegate (`--store s3
--conditional-writes on`, in either `--chain-observe` mode), as
tests/services/s3_versioned.rs runs it: the two results must be equal, since a
request through the gateway gets the answer it would get from the store
directly (SPEC, Data plane; issue 33).

Every request carries one constant token (X-Fencing-Token: 5, added by a
before-sign hook so that it is signed with the request). In `client-head` mode
a chained write whose object's version the gateway does not know is answered
428 `version_unknown`; the script does what a client following
docs/CHAINED.md does: a fenced HEAD of the object (a 404 is fine: absent is a
version), then the same request again. It counts those 428s; they are not part
of the compared answers.

Usage: boto3_versioned.py ENDPOINT BUCKET
Prints one JSON object: "answers" (one per step: status, error code,
delete-marker flag, whether a version id came back), "versions" (the final
list_object_versions, as (is_delete_marker, is_latest) in the listing's own
order, and counts), "stored" (the bytes of the current objects), and, outside
the comparison, "version_unknown" (the 428s met, per step).
"""

import datetime
import json
import sys
import xml.etree.ElementTree as ET

import boto3
import botocore.config
from botocore.exceptions import ClientError

TOKEN = "5"
KEY = "report"
COPY = "copy"
# A tag no object has: an MD5 is never all zeros here.
WRONG_TAG = '"00000000000000000000000000000000"'


def fencing_hook(request, **_):
    request.headers["X-Fencing-Token"] = TOKEN


class LastBody:
    """The raw body of the last answer (the listing's XML, in its order)."""

    def __init__(self):
        self.body = b""

    def hook(self, http_response, **_):
        self.body = http_response.content


def client(endpoint):
    config = botocore.config.Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1})
    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        config=config,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    s3.meta.events.register("before-sign.s3.*", fencing_hook)
    return s3


def delete_marker_flag(headers, parsed):
    """The x-amz-delete-marker header (as a bool), or None when absent."""
    if "DeleteMarker" in parsed:
        return bool(parsed["DeleteMarker"])
    value = headers.get("x-amz-delete-marker")
    if value is None:
        return None
    return value.lower() == "true"


def answer_of(response):
    meta = response["ResponseMetadata"]
    headers = meta.get("HTTPHeaders", {})
    return {
        "status": meta["HTTPStatusCode"],
        "code": None,
        "delete_marker": delete_marker_flag(headers, response),
        "version_id": "VersionId" in response or "x-amz-version-id" in headers,
    }


def error_answer(error):
    response = error.response
    meta = response.get("ResponseMetadata", {})
    headers = meta.get("HTTPHeaders", {})
    return {
        "status": meta.get("HTTPStatusCode"),
        "code": response.get("Error", {}).get("Code"),
        "delete_marker": delete_marker_flag(headers, {}),
        "version_id": "x-amz-version-id" in headers,
    }


class Steps:
    """Runs each step with docs/CHAINED.md's answer to 428 version_unknown
    (a fenced HEAD of the object, then the retry) and records its answer."""

    def __init__(self, s3):
        self.s3 = s3
        self.answers = {}
        self.order = []
        self.unknown = {}

    def learn_version(self, bucket, key):
        try:
            self.s3.head_object(Bucket=bucket, Key=key)
        except ClientError as error:
            # 404 (absent, or a delete marker on top) and 405 (a delete
            # marker asked by id) are versions too.
            if error.response["ResponseMetadata"]["HTTPStatusCode"] not in (404, 405):
                raise

    def run(self, name, call, bucket=None, key=None):
        """`call()` once, again after each 428 version_unknown (at most 3
        times); returns the response or None."""
        response = None
        for _ in range(4):
            try:
                response = call()
                answer = answer_of(response)
            except ClientError as error:
                answer = error_answer(error)
                if answer["status"] == 428 and answer["code"] == "version_unknown" and key is not None:
                    self.unknown[name] = self.unknown.get(name, 0) + 1
                    self.learn_version(bucket, key)
                    continue
            break
        self.answers[name] = answer
        self.order.append(name)
        return response


def listing(body):
    """(is_delete_marker, is_latest) for each entry of a ListVersionsResult,
    in the document's order, and the counts."""
    root = ET.fromstring(body)
    entries = []
    for child in root:
        tag = child.tag.rsplit("}", 1)[-1]
        if tag not in ("Version", "DeleteMarker"):
            continue
        latest = None
        for field in child:
            if field.tag.rsplit("}", 1)[-1] == "IsLatest":
                latest = field.text == "true"
        entries.append([tag == "DeleteMarker", latest])
    return {
        "entries": entries,
        "objects": sum(1 for marker, _ in entries if not marker),
        "delete_markers": sum(1 for marker, _ in entries if marker),
    }


def current_version_id(s3, bucket, key):
    """The id of the key's latest entry, version or delete marker."""
    listed = s3.list_object_versions(Bucket=bucket, Prefix=key)
    for entry in listed.get("Versions", []) + listed.get("DeleteMarkers", []):
        if entry["Key"] == key and entry["IsLatest"]:
            return entry["VersionId"]
    return None


def stored(s3, bucket, key):
    try:
        return s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode()
    except ClientError as error:
        return error.response["ResponseMetadata"]["HTTPStatusCode"]


def main():
    endpoint, bucket = sys.argv[1], sys.argv[2]
    s3 = client(endpoint)
    last = LastBody()
    s3.meta.events.register("after-call.s3.ListObjectVersions", last.hook)
    steps = Steps(s3)

    def put(body):
        return lambda: s3.put_object(Bucket=bucket, Key=KEY, Body=body)

    def delete(**extra):
        return lambda: s3.delete_object(Bucket=bucket, Key=KEY, **extra)

    steps.run("create_bucket", lambda: s3.create_bucket(Bucket=bucket))
    steps.run(
        "put_bucket_versioning",
        lambda: s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"}),
    )
    steps.run("put_1", put(b"v1"), bucket, KEY)
    steps.run("put_2", put(b"v2"), bucket, KEY)
    steps.run("delete_1", delete(), bucket, KEY)
    steps.run("delete_2", delete(), bucket, KEY)
    # The current version is the latest delete marker: deleting it by id
    # (fenced, not chained) brings the previous one back.
    latest = current_version_id(s3, bucket, KEY)
    if latest is not None:
        steps.run("delete_current_by_id", delete(VersionId=latest), bucket, KEY)
    else:
        steps.answers["delete_current_by_id"] = "no current version listed"
        steps.order.append("delete_current_by_id")
    put_3 = steps.run("put_3", put(b"v3"), bucket, KEY)

    steps.run("list_object_versions", lambda: s3.list_object_versions(Bucket=bucket))
    versions = listing(last.body) if steps.answers["list_object_versions"]["status"] == 200 else None

    source_tag = put_3["ETag"] if put_3 is not None else WRONG_TAG
    source = {"Bucket": bucket, "Key": KEY}
    conditions = [
        ("copy_if_match_right", {"CopySourceIfMatch": source_tag}),
        ("copy_if_match_wrong", {"CopySourceIfMatch": WRONG_TAG}),
        ("copy_if_none_match_matching", {"CopySourceIfNoneMatch": source_tag}),
        ("copy_if_none_match_other", {"CopySourceIfNoneMatch": WRONG_TAG}),
        (
            "copy_if_modified_since_future",
            {"CopySourceIfModifiedSince": datetime.datetime(2100, 1, 1, tzinfo=datetime.timezone.utc)},
        ),
        (
            "copy_if_unmodified_since_past",
            {"CopySourceIfUnmodifiedSince": datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)},
        ),
    ]
    for name, condition in conditions:
        steps.run(
            name,
            lambda condition=condition: s3.copy_object(Bucket=bucket, Key=COPY, CopySource=source, **condition),
            bucket,
            COPY,
        )

    result = {
        "answers": steps.answers,
        "order": steps.order,
        "versions": versions,
        "stored": {KEY: stored(s3, bucket, KEY), COPY: stored(s3, bucket, COPY)},
        "version_unknown": steps.unknown,
        "version_unknown_total": sum(steps.unknown.values()),
    }
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
