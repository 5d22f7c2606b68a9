"""The Azure SDK for Python (azure-storage-blob) writing block blobs through
fencegate in front of Azurite, fenced and signed with SharedKey (the
account key, Azurite's default credential), as tests/services/azure_blob.rs runs it.

The token rides on every request the client makes through the client's
`raw_request_hook`, which the SDK runs on each request before it signs it
(docs/CLIENTS.md has the recipe): single-shot uploads, each
staged block and the block-list commit alike. fencegate forwards `Host` and
every `x-ms-*` header as sent and adds none that SharedKey signs, so Azurite
verifies the client's signature as if it were reached directly.

Usage: azure_fenced.py GATEWAY_URL AZURITE_URL CONTAINER
Prints one JSON object with what happened; the Rust test checks it.
"""

import json
import sys

from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.storage.blob import BlobServiceClient

ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class FencingToken:
    """Adds X-Fencing-Token to every request of the client it is given to
    (as its `raw_request_hook`). Set `token` to the lock's token after each
    acquisition."""

    def __init__(self, token=None):
        self.token = token

    def __call__(self, request):
        if self.token is not None:
            request.http_request.headers["X-Fencing-Token"] = str(self.token)


def client(url, key, token, **kwargs):
    return BlobServiceClient(
        f"{url}/{ACCOUNT}",
        credential={"account_name": ACCOUNT, "account_key": key},
        raw_request_hook=token,
        **kwargs,
    )


def outcome(call):
    """"ok", fencegate's own `error` code, or the store's status."""
    try:
        call()
        return "ok"
    except HttpResponseError as error:
        try:
            return json.loads(error.response.text())["error"]
        except (ValueError, KeyError, TypeError, AttributeError):
            return str(error.status_code)


def main():
    gateway, azurite, container = sys.argv[1], sys.argv[2], sys.argv[3]
    direct = BlobServiceClient(f"{azurite}/{ACCOUNT}", credential={"account_name": ACCOUNT, "account_key": KEY})
    direct.create_container(container)

    def stored(name):
        try:
            return direct.get_blob_client(container, name).download_blob().readall()
        except ResourceNotFoundError:
            return b"(absent)"

    token = FencingToken()
    blobs = client(gateway, KEY, token)
    report = blobs.get_blob_client(container, "report")
    result = {}

    # The first holder writes with its token.
    token.token = 40
    result["first"] = outcome(lambda: report.upload_blob(b"v40", overwrite=True))
    # A staged upload: 3 MiB in 1 MiB blocks, the token on every block and
    # on the commit, all signed with SharedKey.
    big = bytes(range(256)) * 4096 * 3
    staged = client(gateway, KEY, token, max_single_put_size=1024 * 1024, max_block_size=1024 * 1024)
    result["staged"] = outcome(
        lambda: staged.get_blob_client(container, "big").upload_blob(big, overwrite=True)
    )
    result["staged_intact"] = result["staged"] == "ok" and stored("big") == big
    # The next holder; then the first one again, paused past its lease.
    token.token = 41
    result["next_holder"] = outcome(lambda: report.upload_blob(b"v41", overwrite=True))
    token.token = 40
    result["stale_put"] = outcome(lambda: report.upload_blob(b"stale", overwrite=True))
    result["stale_delete"] = outcome(lambda: report.delete_blob())
    result["stale_blocks"] = outcome(
        lambda: staged.get_blob_client(container, "report").upload_blob(big, overwrite=True)
    )
    result["stored"] = stored("report").decode(errors="replace")
    # No token: refused (428) by the gateway.
    token.token = None
    result["no_token"] = outcome(lambda: report.upload_blob(b"unfenced", overwrite=True))
    # A wrong account key (the current holder's token): the store checks
    # the signature through the gateway.
    token.token = 41
    wrong = client(gateway, KEY[:-4] + "AAA=", token).get_blob_client(container, "report")
    result["wrong_key"] = outcome(lambda: wrong.upload_blob(b"forged", overwrite=True))
    result["stored_after"] = stored("report").decode(errors="replace")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
