"""A pytest plugin for Ceph's s3-tests (third_party/s3-tests), loaded by
scripts/s3-tests/run.py with `-p fencing_token`. The tests stay as upstream
wrote them; this plugin changes only what boto3 sends, and records what
the store (or the gateway) refused.

The token (FENCEGATE_S3TESTS_TOKEN), in `X-Fencing-Token` (or
FENCEGATE_TOKEN_HEADER) of every S3 request boto3 signs:
  per-test     one higher for each test than for the test before, the same
               for every request of a test (its setup and teardown too): each
               test a new lock holder, whose threads share its token;
  increasing   one higher for each request than for the one before: each
               request a new lock holder, so that the requests a test sends
               at once from several threads race, and the late ones are
               refused 409 stale_token (as fencing should);
  fixed:N      N on every request;
  off          nothing added (the run against moto directly).
The header is added in boto3's `before-sign` hook, so the SigV4 signature
covers it, as docs/CUSTODY.md asks of a custody client (the gateway refuses
a token it did not see signed). A presigned URL gets none: its caller sends
it with `requests`, which would not send the header the URL was signed over.
Requests s3-tests makes with `requests` itself (POST-policy uploads, raw
HTTP) carry no token either.

The record (FENCEGATE_S3TESTS_ERRORS, a file): one JSON line per S3 answer
with a status of 400 or more that boto3 received, naming the test that was
running: {"test", "op", "status", "code", "message"}.
"""

import itertools
import json
import os
import threading

import botocore.session

HEADER = os.environ.get("FENCEGATE_TOKEN_HEADER", "X-Fencing-Token")
MODE = os.environ.get("FENCEGATE_S3TESTS_TOKEN", "off")
ERRORS = os.environ.get("FENCEGATE_S3TESTS_ERRORS")

_lock = threading.Lock()
_counter = itertools.count(1)
_current = {"test": None, "token": 0}
_errors_file = open(ERRORS, "a", buffering=1) if ERRORS else None

if MODE.startswith("fixed:"):
    _fixed = int(MODE.split(":", 1)[1])
elif MODE not in ("off", "increasing", "per-test"):
    raise SystemExit(
        f"fencing_token: FENCEGATE_S3TESTS_TOKEN={MODE!r}: per-test, increasing, fixed:N or off"
    )


def _next_token():
    if MODE == "increasing":
        with _lock:
            return next(_counter)
    if MODE == "per-test":
        return _current["token"]
    return _fixed


def _add_token(request, signature_version=None, **kwargs):
    """before-sign: the token header, replaced (a retry signs again)."""
    if request.context.get("is_presign_request") or (
        isinstance(signature_version, str) and signature_version.endswith("-query")
    ):
        return
    # botocore's headers append on assignment: remove a retry's first.
    if HEADER in request.headers:
        del request.headers[HEADER]
    request.headers[HEADER] = str(_next_token())


def _record(http_response=None, parsed=None, model=None, **kwargs):
    """after-call: a refused request, with the test it belongs to."""
    if _errors_file is None or http_response is None or http_response.status_code < 400:
        return
    error = (parsed or {}).get("Error", {}) if isinstance(parsed, dict) else {}
    line = {
        "test": _current["test"],
        "op": getattr(model, "name", None),
        "status": http_response.status_code,
        "code": error.get("Code"),
        "message": (error.get("Message") or "")[:300],
    }
    with _lock:
        _errors_file.write(json.dumps(line) + "\n")


_create_client = botocore.session.Session.create_client


def create_client(self, service_name, *args, **kwargs):
    client = _create_client(self, service_name, *args, **kwargs)
    if service_name == "s3":
        if MODE != "off":
            client.meta.events.register("before-sign.s3", _add_token)
        client.meta.events.register("after-call.s3", _record)
    return client


botocore.session.Session.create_client = create_client


def pytest_runtest_logstart(nodeid, location):
    _current["test"] = nodeid.rsplit("::", 1)[-1]
    _current["token"] += 1


def _list_versions(client, bucket, batch_size):
    """s3-tests' cleanup listing (s3tests.functional.list_versions), for
    moto: moto 5.2.5 answers a ListObjectVersions whose key-marker names a
    key deleted since with nothing, so s3-tests' cleanup, which deletes each
    page before it asks for the next, leaves a bucket of more than one page
    (128 versions) behind, and every following test's setup fails on it
    (DeleteBucket 409 BucketNotEmpty) until enough of them have deleted
    128 more. This lists from the start again after each page instead,
    until nothing is left or a page comes back unchanged (versions that
    cannot be deleted, which s3-tests' cleanup then waits for)."""
    last = None
    while True:
        listing = client.list_object_versions(Bucket=bucket, MaxKeys=batch_size)
        objs = listing.get("Versions", []) + listing.get("DeleteMarkers", [])
        page = [{"Key": o["Key"], "VersionId": o["VersionId"]} for o in objs]
        if not page or page == last:
            return
        last = page
        yield page


def pytest_configure(config):
    import s3tests.functional

    s3tests.functional.list_versions = _list_versions
