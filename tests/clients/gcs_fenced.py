"""Google's own Cloud Storage client (google-cloud-storage) writing to a GCS
emulator through fencegate's JSON-API support, as tests/services/gcs_json.rs runs it.

The fencing token travels in X-Fencing-Token on every request: the client is
given its own requests.Session (in production a
google.auth.transport.requests.AuthorizedSession) whose default headers carry
the current holder's token.

What the client does with a small upload matters: Blob.upload_from_string
(and upload_from_file/filename up to 8 MiB) sends one
POST /upload/storage/v1/b/B/o?uploadType=multipart whose object name is in
the JSON part of the body, never in the query, so the gateway cannot fence it
and refuses it (400 unfenceable_write). Larger uploads start a resumable
session (?uploadType=resumable), named in the body too, so refused likewise
(not run here). The recipe that works is a single-request media upload with
?name= in the query, sent through the same session; deletes, reads and
metadata go through the client as usual.

One more thing the client does: google-api-core reads every error body of a
JSON-API call (not uploads) as GCS's {"error": {"message": ...}}, so the
gateway's {"error": "stale_token", ...} makes it raise AttributeError
("'str' object has no attribute 'get'") instead of Conflict. The refusal
holds; the caller just cannot tell a stale token from a bug by the
exception's type.

Usage: gcs_fenced.py GATEWAY_URL BUCKET OBJECT
Prints one JSON object: for each step, what the client call returned or
raised and every request it sent with the answer (exit 0 unless the script
itself broke: the Rust test judges the answers).
"""

import json
import sys
from urllib.parse import urlsplit

import requests
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage


def exchange(response):
    """One request the client sent and the answer: the request line, the
    status, and the gateway's error code when the gateway made the answer
    (its JSON body has a string `error`; GCS's own errors are objects)."""
    url = urlsplit(response.url)
    out = {
        "request": "{} {}{}".format(
            response.request.method, url.path, "?" + url.query if url.query else ""
        ),
        "status": response.status_code,
    }
    if response.headers.get("content-type", "").startswith("application/json"):
        try:
            error = response.json().get("error")
        except (ValueError, AttributeError):
            error = None
        if isinstance(error, str):
            out["error"] = error
    return out


def main():
    gateway, bucket_name, object_name = sys.argv[1:4]
    session = requests.Session()
    # The environment's proxy must not stand between the client and the
    # gateway.
    session.trust_env = False
    sent = []
    session.hooks["response"].append(lambda response, *_, **__: sent.append(response))

    def holder(token):
        session.headers["X-Fencing-Token"] = str(token)

    def step(call):
        """Runs one client call: what it returned or raised, and every
        request it sent with its answer."""
        del sent[:]
        out = {}
        try:
            out["returned"] = call()
        except Exception as err:  # whatever the client raises is the finding
            out["raised"] = type(err).__name__
            out["message"] = str(err)[:300]
        out["exchanges"] = [exchange(response) for response in sent]
        return out

    client = storage.Client(
        project="fencegate-test",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": gateway},
        _http=session,
    )
    bucket = client.bucket(bucket_name)
    blob = bucket.blob(object_name)
    result = {}

    holder(34)
    result["create_bucket"] = step(lambda: client.create_bucket(bucket_name).name)
    # The client's own small upload: a multipart upload named in its body.
    result["upload_from_string"] = step(
        lambda: blob.upload_from_string(b"by upload_from_string", content_type="text/plain")
    )

    # The recipe: a media upload that names its object in the query.
    def media_upload(data):
        return session.post(
            "{}/upload/storage/v1/b/{}/o".format(gateway, bucket_name),
            params={"uploadType": "media", "name": object_name},
            data=data,
            headers={"Content-Type": "text/plain"},
        ).status_code

    result["media_upload"] = step(lambda: media_upload(b"written by holder 34"))
    result["download"] = step(lambda: blob.download_as_bytes().decode())

    # A stale holder: its delete and its upload are refused.
    holder(33)
    result["stale_delete"] = step(lambda: bucket.blob(object_name).delete())
    result["stale_media_upload"] = step(lambda: media_upload(b"written by holder 33"))

    # The next holder finds holder 34's object untouched, and deletes it.
    holder(35)
    result["download_after_stale"] = step(lambda: blob.download_as_bytes().decode())
    result["delete"] = step(lambda: bucket.blob(object_name).delete())
    result["exists_after_delete"] = step(lambda: bucket.blob(object_name).exists())

    print(json.dumps(result))


if __name__ == "__main__":
    main()
