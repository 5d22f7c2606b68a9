"""A stock boto3 client of a gateway under credential custody (SPEC "Credential
custody", --store s3): it signs with credentials of the gateway's own
(an identity's access key id and secret), never the store's. Unmodified but
for the fencing token, which a before-sign hook adds so that it is among the
signed headers (a presigned URL's X-Amz-SignedHeaders too). Run by the
custody tests; also runs against a store directly (moto with authentication,
tests/support/moto_auth.py, signed with the store's IAM key), which proves
every step is one the store itself serves.

Usage: boto3_custody.py GATEWAY_URL ACCESS_KEY_ID SECRET BUCKET [--virtual-domain NAME]
  without --virtual-domain: path-style requests to GATEWAY_URL
  --virtual-domain NAME: virtual-hosted style, the client signing for
      http://BUCKET.NAME:PORT (PORT: GATEWAY_URL's). BUCKET.NAME need not
      resolve (bucket.localhost does not, on hosts without nss-myhostname):
      every request, presigned fetches included, goes to GATEWAY_URL as its
      HTTP proxy (absolute-form target http://BUCKET.NAME:PORT/key, Host
      BUCKET.NAME:PORT).

Token 5 on every request, then one stale write with token 4. Prints ONE JSON
object: each step's result, "ok" or what went wrong ("STATUS CODE" of the
store's or gateway's error; "STATUS" alone for a HEAD; "mismatch: ..." when
a step's data came back wrong; else "ExceptionName: text"); "stale_write":
{"code", "message", "status"} of the error it raised (code null and status
200 if it was accepted); "payloads": for each operation sent, the
x-amz-content-sha256 kinds it signed ("sha256", "UNSIGNED-PAYLOAD",
"STREAMING-..."); and "addressing" ("path" or "virtual via proxy"). Exits 0
whenever it printed.
"""

import hashlib
import json
import os
import sys
import tempfile
from urllib.parse import urlsplit

import boto3
import botocore.config
import requests
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

MIB = 1024 * 1024
TOKEN = 5
STALE = 4


class TokenHolder:
    """The token every request carries; a plain attribute, not a contextvar,
    since upload_file and download_file send parts from worker threads."""

    def __init__(self, token):
        self.token = token

    def sign_hook(self, request, **_):
        if self.token is not None:
            request.headers["X-Fencing-Token"] = str(self.token)


class Payloads:
    """What each operation put in x-amz-content-sha256, as sent."""

    def __init__(self):
        self.seen = {}

    def send_hook(self, request, event_name, **_):
        operation = event_name.rsplit(".", 1)[-1]
        value = request.headers.get("x-amz-content-sha256")
        if isinstance(value, bytes):
            value = value.decode()
        if value is None:
            kind = "none"
        elif len(value) == 64 and all(c in "0123456789abcdef" for c in value):
            kind = "sha256"
        else:
            kind = value
        kinds = self.seen.setdefault(operation, [])
        if kind not in kinds:
            kinds.append(kind)


def describe(error):
    """'STATUS CODE' of a ClientError (found through the chain of an
    S3UploadFailedError and the like), else 'ExceptionName: text'."""
    seen = error
    while seen is not None:
        if isinstance(seen, ClientError):
            response = seen.response
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            code = response.get("Error", {}).get("Code")
            return f"{status} {code}" if code and str(code) != str(status) else str(status)
        seen = seen.__cause__ or seen.__context__
    return f"{type(error).__name__}: {error}"


def http_error(resp):
    """'STATUS CODE' of a plain HTTP answer (its S3 error document's Code)."""
    text = resp.text
    code = ""
    if "<Code>" in text:
        code = text.split("<Code>", 1)[1].split("</Code>", 1)[0]
    else:
        code = resp.reason or ""
    return f"{resp.status_code} {code}".strip()


def main():
    args = sys.argv[1:]
    domain = None
    if "--virtual-domain" in args:
        at = args.index("--virtual-domain")
        domain = args[at + 1]
        del args[at : at + 2]
    if len(args) != 4:
        sys.exit(__doc__)
    gateway, key_id, secret, bucket = args
    port = urlsplit(gateway).port or 80

    holder = TokenHolder(TOKEN)
    payloads = Payloads()
    if domain is None:
        endpoint = gateway
        style = {"addressing_style": "path"}
        proxies = {}  # straight to GATEWAY_URL, whatever HTTP_PROXY says
        result = {"addressing": "path"}
    else:
        endpoint = f"http://{domain}:{port}"
        style = {"addressing_style": "virtual"}
        proxies = {"http": gateway}
        result = {"addressing": "virtual via proxy"}
    config = botocore.config.Config(
        s3=style,
        proxies=proxies,
        retries={"max_attempts": 1},
        # SigV4 presigned URLs: left alone, boto3 presigns S3 URLs with SigV2
        # (AWSAccessKeyId=...&Signature=...), which custody refuses.
        signature_version="s3v4",
    )
    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        config=config,
    )
    s3.meta.events.register("before-sign.s3.*", holder.sign_hook)
    s3.meta.events.register("before-send.s3.*", payloads.send_hook)
    # Presigned URLs are fetched with requests, ignoring the environment's
    # proxies (and NO_PROXY, which often names localhost).
    web = requests.Session()
    web.trust_env = False
    # trust_env off ignores REQUESTS_CA_BUNDLE too: a TLS gateway's test CA
    # comes from AWS_CA_BUNDLE, as boto3's does.
    if os.environ.get("AWS_CA_BUNDLE"):
        web.verify = os.environ["AWS_CA_BUNDLE"]
    if proxies:
        web.proxies = dict(proxies)

    def step(name, action):
        try:
            outcome = action()
            result[name] = "ok" if outcome is None else outcome
        except Exception as error:  # every step runs, whatever the others did
            result[name] = describe(error)

    def expect(got, want, what):
        return None if got == want else f"mismatch: {what}: {got[:60]!r} is not {want[:60]!r}"

    step("create_bucket", lambda: s3.create_bucket(Bucket=bucket) and None)
    step("put_new", lambda: s3.put_object(Bucket=bucket, Key="report.csv", Body=b"first") and None)
    step("put_existing", lambda: s3.put_object(Bucket=bucket, Key="report.csv", Body=b"second") and None)

    def get():
        body = s3.get_object(Bucket=bucket, Key="report.csv")["Body"].read()
        return expect(body, b"second", "report.csv")

    step("get", get)

    transfer = TransferConfig(
        multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB, max_concurrency=4, use_threads=True
    )
    big = os.urandom(12 * MIB)
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "up.bin")
        with open(source, "wb") as file:
            file.write(big)

        def upload():
            s3.upload_file(source, bucket, "big.bin", Config=transfer)
            parts = s3.head_object(Bucket=bucket, Key="big.bin").get("ETag", "")
            # A multipart upload's ETag ends in -<parts>.
            return None if parts.strip('"').endswith("-3") else f"mismatch: ETag {parts} is not of 3 parts"

        step("upload_file_multipart", upload)

        def download():
            target = os.path.join(tmp, "down.bin")
            s3.download_file(bucket, "big.bin", target, Config=transfer)
            with open(target, "rb") as file:
                got = file.read()
            if hashlib.sha256(got).digest() != hashlib.sha256(big).digest():
                return f"mismatch: downloaded {len(got)} bytes differ from the {len(big)} uploaded"
            return None

        step("download_file_ranges", download)

    def abort_listed():
        # An upload left behind, found by listing and aborted with the id
        # the listing shows (under custody the gateway's, sealed for its
        # key, as the one CreateMultipartUpload handed out).
        created = s3.create_multipart_upload(Bucket=bucket, Key="abandoned.bin")["UploadId"]
        listed = [
            u["UploadId"]
            for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
            if u["Key"] == "abandoned.bin"
        ]
        if listed != [created]:
            return f"mismatch: listed {listed}, created {created}"
        s3.abort_multipart_upload(Bucket=bucket, Key="abandoned.bin", UploadId=listed[0])
        left = s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
        return None if not left else f"mismatch: {len(left)} uploads left"

    step("abort_listed_upload", abort_listed)

    def copy():
        s3.copy_object(Bucket=bucket, Key="copy.csv", CopySource={"Bucket": bucket, "Key": "report.csv"})
        return expect(s3.get_object(Bucket=bucket, Key="copy.csv")["Body"].read(), b"second", "copy.csv")

    step("copy_object", copy)

    def delete():
        s3.delete_object(Bucket=bucket, Key="copy.csv")
        try:
            s3.head_object(Bucket=bucket, Key="copy.csv")
            return "mismatch: copy.csv is still there"
        except ClientError as error:
            return None if describe(error) == "404" else describe(error)

    step("delete_object", delete)

    def delete_many():
        keys = [f"many/{n}" for n in range(3)]
        for key in keys:
            s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
        answer = s3.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": key} for key in keys]}
        )
        if answer.get("Errors"):
            return "errors: " + ", ".join(f"{e['Key']} {e['Code']}" for e in answer["Errors"])
        deleted = sorted(d["Key"] for d in answer.get("Deleted", []))
        if deleted != keys:
            return f"mismatch: deleted {deleted}"
        left = s3.list_objects_v2(Bucket=bucket, Prefix="many/").get("KeyCount")
        return None if left == 0 else f"mismatch: {left} of many/ left"

    step("delete_objects", delete_many)

    def presigned_get():
        url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "report.csv"})
        # The hook signed X-Fencing-Token into the URL (X-Amz-SignedHeaders
        # names it, the value is not in the URL): the fetch must send it.
        resp = web.get(url, headers={"X-Fencing-Token": str(TOKEN)})
        if resp.status_code != 200:
            return http_error(resp)
        return expect(resp.content, b"second", "presigned GET body")

    step("presigned_get", presigned_get)

    def presigned_put():
        url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "presigned.csv"})
        # As for the GET: the token is a signed header the fetch must send.
        resp = web.put(url, data=b"by url", headers={"X-Fencing-Token": str(TOKEN)})
        if resp.status_code != 200:
            return http_error(resp)
        body = s3.get_object(Bucket=bucket, Key="presigned.csv")["Body"].read()
        return expect(body, b"by url", "presigned.csv")

    step("presigned_put", presigned_put)

    def listing():
        keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))
        want = ["big.bin", "presigned.csv", "report.csv"]
        if result.get("presigned_put") != "ok":
            want.remove("presigned.csv")
        return None if keys == want else f"mismatch: listed {keys}, not {want}"

    step("list_objects_v2", listing)

    holder.token = STALE
    try:
        s3.put_object(Bucket=bucket, Key="report.csv", Body=b"stale")
        result["stale_write"] = {"code": None, "message": None, "status": 200}
    except ClientError as error:
        response = error.response
        result["stale_write"] = {
            "code": response["Error"].get("Code"),
            "message": response["Error"].get("Message"),
            "status": response["ResponseMetadata"]["HTTPStatusCode"],
        }
    except Exception as error:
        result["stale_write"] = {"code": None, "message": describe(error), "status": None}
    holder.token = TOKEN

    result["payloads"] = payloads.seen
    print(json.dumps(result))


if __name__ == "__main__":
    main()
