"""A pytest plugin for Ceph's s3-tests (third_party/s3-tests), loaded by
scripts/s3-tests/run.py with `-p fencing_token`. The tests stay as upstream
wrote them; this plugin changes only what boto3 sends, and records what
the store (or the gateway) refused.

The token (FENCEGATE_S3TESTS_TOKEN):
  off          nothing added (the run against moto directly);
  increasing   every S3 request boto3 signs carries `X-Fencing-Token` (or
               FENCEGATE_TOKEN_HEADER), one higher than the last request's:
               a lock holder whose lock is taken again and again, each
               request raising its fences;
  fixed:N      every request carries N.
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
_current = {"test": None}
_errors_file = open(ERRORS, "a", buffering=1) if ERRORS else None

if MODE.startswith("fixed:"):
    _fixed = int(MODE.split(":", 1)[1])
elif MODE not in ("off", "increasing"):
    raise SystemExit(f"fencing_token: FENCEGATE_S3TESTS_TOKEN={MODE!r}: off, increasing or fixed:N")


def _next_token():
    if MODE == "increasing":
        with _lock:
            return next(_counter)
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
