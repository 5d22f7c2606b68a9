"""moto's S3 server with authentication enforced: the store of the credential
custody tests (SPEC "Credential custody"), whose only door is the gateway's
IAM key. tests/support/moto_auth.rs runs it; it also works by hand.

moto checks credentials only once it has served INITIAL_NO_AUTH_ACTION_COUNT
actions (an environment variable read by moto_server at start; every service's
actions count, S3's included, and nothing but that variable is needed). Before
that, every request is served as if signed by the root user. The setup below
spends exactly SETUP_ACTIONS of them (all IAM): so a moto started with
INITIAL_NO_AUTH_ACTION_COUNT=SETUP_ACTIONS enforces from the first request
after the setup, which checks that it does. Once enforcing, moto answers S3
requests signed with an unknown key 403 InvalidAccessKeyId, with a known key
and a wrong secret 403 SignatureDoesNotMatch, and with a deleted key 403
InvalidAccessKeyId.

What enforcing moto does not do (moto 5.2.5, moto/iam/access_control.py):
it authenticates the Authorization header only, so a presigned URL or an
unsigned request is answered 500 (a KeyError on Authorization; an unsigned
GET of an existing object is 403 with an empty body); it recomputes the
signature with x-amz-content-sha256 as sent, never hashing the body (a body
other than the signed one is stored) nor checking aws-chunked chunk
signatures; it checks neither X-Amz-Date's skew nor the scope's region; and
headers outside SignedHeaders (x-amz-meta-*) are accepted. Tests of those
belong to the gateway's side.

Two IAM users are made:
  - "fencegate": the gateway's key (policy "fencegate-s3": s3:* on *);
  - "fencegate-admin": iam:* on *, kept by the harness to revoke or add the
    gateway's keys while moto enforces (the gateway's key cannot touch IAM).
No bucket is made.

Usage (python from the project's venv, target/venv/bin/python):
  moto_auth.py serve [PORT]
      starts target/venv/bin/moto_server on 127.0.0.1:PORT (default: a free
      port) with INITIAL_NO_AUTH_ACTION_COUNT=SETUP_ACTIONS, does the setup,
      prints the JSON of `setup` (with "url" too) and runs until interrupted
  moto_auth.py setup URL
      the setup, against a moto just started with
      INITIAL_NO_AUTH_ACTION_COUNT=SETUP_ACTIONS; prints one JSON line:
      {"access_key_id", "secret_access_key", "admin_access_key_id",
       "admin_secret_access_key"}
  moto_auth.py revoke URL ADMIN_KEY_ID ADMIN_SECRET KEY_ID
      deletes the gateway user's key KEY_ID (signed by the admin user);
      prints {"revoked": KEY_ID}
  moto_auth.py new-key URL ADMIN_KEY_ID ADMIN_SECRET
      a further key of the gateway user (a rotation's new key); prints
      {"access_key_id", "secret_access_key"}
  moto_auth.py get URL KEY_ID SECRET BUCKET KEY
      what moto holds at BUCKET/KEY, read with KEY_ID; prints
      {"status": 200, "body_hex": ...} or {"status", "code"} of the error
  moto_auth.py uploads URL KEY_ID SECRET BUCKET
      the multipart uploads in progress in BUCKET, read with KEY_ID (the
      store's ids): prints {"uploads": [{"key", "upload_id", "parts": [N,
      ...]}, ...]}
  moto_auth.py actions
      prints SETUP_ACTIONS
  moto_auth.py selftest
      `serve` on a free port, then checks what the custody tests rely on and
      prints one JSON object of results; exits 0 if all held
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

# The IAM actions `setup` makes (one each): create_user x2, create_policy,
# attach_user_policy, put_user_policy, create_access_key x2.
SETUP_ACTIONS = 7

GATEWAY_USER = "fencegate"
ADMIN_USER = "fencegate-admin"
REGION = "us-east-1"

S3_ALL = json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
)
IAM_ALL = json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "iam:*", "Resource": "*"}]}
)


def _client(service, url, key_id, secret):
    import boto3
    import botocore.config

    return boto3.client(
        service,
        endpoint_url=url,
        region_name=REGION,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        config=botocore.config.Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 1},
            # Straight to moto, whatever HTTP_PROXY says.
            proxies={},
        ),
    )


def _error_code(call):
    """The error code `call` raised, or None if it succeeded."""
    from botocore.exceptions import ClientError

    try:
        call()
        return None
    except ClientError as error:
        return error.response["Error"].get("Code")


def setup(url):
    """Makes the two users and their keys while moto does not yet check
    credentials, then checks that it now does."""
    # Any key signs the setup: moto serves it as its root user.
    iam = _client("iam", url, "setup", "setup")
    iam.create_user(UserName=GATEWAY_USER)  # 1
    arn = iam.create_policy(PolicyName="fencegate-s3", PolicyDocument=S3_ALL)["Policy"]["Arn"]  # 2
    iam.attach_user_policy(UserName=GATEWAY_USER, PolicyArn=arn)  # 3
    key = iam.create_access_key(UserName=GATEWAY_USER)["AccessKey"]  # 4
    iam.create_user(UserName=ADMIN_USER)  # 5
    iam.put_user_policy(UserName=ADMIN_USER, PolicyName="fencegate-iam", PolicyDocument=IAM_ALL)  # 6
    admin = iam.create_access_key(UserName=ADMIN_USER)["AccessKey"]  # 7
    # Enforcing now? An unknown key must be refused (a refused request does
    # not count; a served one would have spent an action, and the check fails).
    code = _error_code(lambda: _client("s3", url, "FGSETUPPROBE", "x").list_buckets())
    if code != "InvalidAccessKeyId":
        sys.exit(
            f"moto_auth.py: moto at {url} does not enforce authentication after the "
            f"{SETUP_ACTIONS} setup actions (an unknown key got {code or 'served'}): was it "
            f"started with INITIAL_NO_AUTH_ACTION_COUNT={SETUP_ACTIONS} and asked nothing before?"
        )
    return {
        "access_key_id": key["AccessKeyId"],
        "secret_access_key": key["SecretAccessKey"],
        "admin_access_key_id": admin["AccessKeyId"],
        "admin_secret_access_key": admin["SecretAccessKey"],
    }


def revoke(url, admin_key_id, admin_secret, key_id):
    _client("iam", url, admin_key_id, admin_secret).delete_access_key(
        UserName=GATEWAY_USER, AccessKeyId=key_id
    )
    return {"revoked": key_id}


def new_key(url, admin_key_id, admin_secret):
    key = _client("iam", url, admin_key_id, admin_secret).create_access_key(UserName=GATEWAY_USER)[
        "AccessKey"
    ]
    return {"access_key_id": key["AccessKeyId"], "secret_access_key": key["SecretAccessKey"]}


def get(url, key_id, secret, bucket, key):
    """What moto holds at BUCKET/KEY, read with KEY_ID (the store's view, no
    gateway between): {"status": 200, "body_hex": ...} or {"status": S,
    "code": C} (404 NoSuchKey, say)."""
    from botocore.exceptions import ClientError

    try:
        body = _client("s3", url, key_id, secret).get_object(Bucket=bucket, Key=key)["Body"].read()
        return {"status": 200, "body_hex": body.hex()}
    except ClientError as error:
        return {
            "status": error.response["ResponseMetadata"]["HTTPStatusCode"],
            "code": error.response["Error"].get("Code"),
        }


def uploads(url, key_id, secret, bucket):
    """The multipart uploads in progress in BUCKET as moto holds them, read
    with KEY_ID (no gateway between): each one's key, the store's id and its
    parts' numbers."""
    s3 = _client("s3", url, key_id, secret)
    found = []
    for upload in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
        parts = s3.list_parts(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
        found.append(
            {
                "key": upload["Key"],
                "upload_id": upload["UploadId"],
                "parts": [part["PartNumber"] for part in parts.get("Parts", [])],
            }
        )
    return {"uploads": found}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto(port):
    """moto_server of this venv on 127.0.0.1:PORT, enforcing after the setup;
    returns once it listens."""
    moto_server = os.path.join(os.path.dirname(sys.executable), "moto_server")
    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT=str(SETUP_ACTIONS))
    proc = subprocess.Popen(
        [moto_server, "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    # werkzeug says "Running on" once bound (tests/support/moto.rs waits alike).
    deadline = time.monotonic() + 30
    for line in proc.stderr:
        if "Running on" in line:
            break
        if time.monotonic() > deadline:
            break
    else:
        sys.exit(f"moto_auth.py: moto_server exited before listening on {port}")
    # Drain its request log so that it never blocks on a full pipe.
    import threading

    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    return proc


def selftest():
    """What the custody tests rely on, checked against a fresh moto."""
    port = _free_port()
    proc = start_moto(port)
    url = f"http://127.0.0.1:{port}"
    out = {"url": url}
    try:
        keys = setup(url)
        gw = _client("s3", url, keys["access_key_id"], keys["secret_access_key"])
        bucket = "selftest"
        out["iam_key_create_bucket"] = _error_code(lambda: gw.create_bucket(Bucket=bucket)) or "ok"
        out["iam_key_put"] = _error_code(lambda: gw.put_object(Bucket=bucket, Key="k", Body=b"v")) or "ok"
        out["iam_key_get"] = gw.get_object(Bucket=bucket, Key="k")["Body"].read().decode()
        stranger = _client("s3", url, "FGCLIENT01", "client-secret")
        out["unknown_key_get"] = _error_code(lambda: stranger.get_object(Bucket=bucket, Key="k"))
        out["unknown_key_put"] = _error_code(lambda: stranger.put_object(Bucket=bucket, Key="k", Body=b"x"))
        out["unknown_key_list_buckets"] = _error_code(stranger.list_buckets)
        wrong = _client("s3", url, keys["access_key_id"], "not-the-secret")
        out["wrong_secret_get"] = _error_code(lambda: wrong.get_object(Bucket=bucket, Key="k"))
        out["wrong_secret_put"] = _error_code(lambda: wrong.put_object(Bucket=bucket, Key="k", Body=b"x"))
        admin_s3 = _client("s3", url, keys["admin_access_key_id"], keys["admin_secret_access_key"])
        out["admin_key_s3"] = _error_code(lambda: admin_s3.get_object(Bucket=bucket, Key="k")) or "ok"
        gw_iam = _client("iam", url, keys["access_key_id"], keys["secret_access_key"])
        out["iam_key_iam"] = _error_code(lambda: gw_iam.list_users()) or "ok"
        rotated = new_key(url, keys["admin_access_key_id"], keys["admin_secret_access_key"])
        revoke(url, keys["admin_access_key_id"], keys["admin_secret_access_key"], keys["access_key_id"])
        out["revoked_key_get"] = _error_code(lambda: gw.get_object(Bucket=bucket, Key="k"))
        out["revoked_key_put"] = _error_code(lambda: gw.put_object(Bucket=bucket, Key="k", Body=b"x"))
        new = _client("s3", url, rotated["access_key_id"], rotated["secret_access_key"])
        out["new_key_get"] = new.get_object(Bucket=bucket, Key="k")["Body"].read().decode()
    finally:
        proc.kill()
        proc.wait()
    expected = {
        "iam_key_create_bucket": "ok",
        "iam_key_put": "ok",
        "iam_key_get": "v",
        "unknown_key_get": "InvalidAccessKeyId",
        "unknown_key_put": "InvalidAccessKeyId",
        "unknown_key_list_buckets": "InvalidAccessKeyId",
        "wrong_secret_get": "SignatureDoesNotMatch",
        "wrong_secret_put": "SignatureDoesNotMatch",
        "admin_key_s3": "AccessDenied",
        "iam_key_iam": "AccessDenied",
        "revoked_key_get": "InvalidAccessKeyId",
        "revoked_key_put": "InvalidAccessKeyId",
        "new_key_get": "v",
    }
    out["failed"] = {k: out.get(k) for k, v in expected.items() if out.get(k) != v}
    print(json.dumps(out))
    return not out["failed"]


def main():
    args = sys.argv[1:]
    command = args[0] if args else ""
    if command == "setup" and len(args) == 2:
        print(json.dumps(setup(args[1])))
    elif command == "revoke" and len(args) == 5:
        print(json.dumps(revoke(*args[1:])))
    elif command == "new-key" and len(args) == 4:
        print(json.dumps(new_key(*args[1:])))
    elif command == "get" and len(args) == 6:
        print(json.dumps(get(*args[1:])))
    elif command == "uploads" and len(args) == 5:
        print(json.dumps(uploads(*args[1:])))
    elif command == "actions" and len(args) == 1:
        print(SETUP_ACTIONS)
    elif command == "serve" and len(args) in (1, 2):
        port = int(args[1]) if len(args) == 2 else _free_port()
        proc = start_moto(port)
        url = f"http://127.0.0.1:{port}"
        try:
            print(json.dumps(dict(setup(url), url=url)), flush=True)
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
            proc.wait()
        except KeyboardInterrupt:
            pass
        finally:
            proc.kill()
            proc.wait()
    elif command == "selftest" and len(args) == 1:
        sys.exit(0 if selftest() else 1)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
