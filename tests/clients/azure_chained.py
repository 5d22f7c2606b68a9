"""The Azure SDK for Python (azure-storage-blob) writing a block blob through
fencegate with `--conditional-writes azure`, in front of Azurite, as
tests/services/chained_writes.rs runs it. Every fenced call carries X-Fencing-Token
as a per-request header (`headers=`). The client is authorised with an
account SAS (in the query: no signature covers the condition headers the
gateway adds); a client signing with SharedKey is refused 400
unchainable_write unless it sends its own condition.

Usage: azure_chained.py GATEWAY_URL AZURITE_URL CONTAINER
Prints one JSON object with what happened; the Rust test checks it.
       azure_chained.py sas AZURITE_URL CONTAINER
Makes the container and prints an account SAS, for raw requests.
"""

import datetime
import json
import sys

from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.storage.blob import (
    AccountSasPermissions,
    BlobServiceClient,
    ResourceTypes,
    generate_account_sas,
)

ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def fenced(token):
    return {"headers": {"X-Fencing-Token": str(token)}}


def error_code(error):
    """fencegate's own JSON `error`, or the store's status."""
    try:
        return json.loads(error.response.text())["error"]
    except (ValueError, KeyError, TypeError, AttributeError):
        return str(error.status_code)


def chained_upload(blob, data, token, log):
    """The cookbook's recipe: on version_unknown, or version_conflict with
    retry true, a fenced get_blob_properties (HEAD) and the same write."""
    for _ in range(3):
        try:
            blob.upload_blob(data, overwrite=True, **fenced(token))
            log.append("put")
            return True
        except HttpResponseError as error:
            code = error_code(error)
            log.append(code)
            retry = code == "version_unknown"
            if code == "version_conflict":
                retry = json.loads(error.response.text()).get("retry", False)
            if not retry:
                return False
            try:
                blob.get_blob_properties(**fenced(token))
            except ResourceNotFoundError:
                pass
    return False


def account_sas():
    return generate_account_sas(
        account_name=ACCOUNT,
        account_key=KEY,
        resource_types=ResourceTypes(service=True, container=True, object=True),
        permission=AccountSasPermissions(read=True, write=True, delete=True, create=True, list=True),
        expiry=datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1),
    )


def main():
    if sys.argv[1] == "sas":
        # For raw requests: an account SAS, and the container made.
        direct = BlobServiceClient(sys.argv[2] + f"/{ACCOUNT}",
                                   credential={"account_name": ACCOUNT, "account_key": KEY})
        direct.create_container(sys.argv[3])
        print(account_sas())
        return
    gateway, azurite, container = sys.argv[1], sys.argv[2], sys.argv[3]
    sas = account_sas()
    through = BlobServiceClient(f"{gateway}/{ACCOUNT}", credential=sas)
    direct = BlobServiceClient(f"{azurite}/{ACCOUNT}", credential={"account_name": ACCOUNT, "account_key": KEY})
    direct.create_container(container)
    blob = through.get_blob_client(container, "report")
    behind = direct.get_blob_client(container, "report")
    result = {}
    log = []
    result["first"] = chained_upload(blob, b"v1", 40, log)
    for n in range(2, 5):
        result[f"write_{n}"] = chained_upload(blob, f"v{n}".encode(), 40, log)
    behind.upload_blob(b"behind", overwrite=True)
    result["after_behind"] = chained_upload(blob, b"v5", 40, log)
    # A staged multi-block upload: the token on every block and the commit.
    big = bytes(range(256)) * 4096 * 3  # 3 MiB, in 1 MiB blocks
    staged = BlobServiceClient(
        f"{gateway}/{ACCOUNT}", credential=sas,
        max_single_put_size=1024 * 1024, max_block_size=1024 * 1024,
    ).get_blob_client(container, "report")
    try:
        staged.upload_blob(big, overwrite=True, **fenced(40))
        log.append("blocks")
        result["blocks"] = True
    except HttpResponseError as error:
        log.append(error_code(error))
        result["blocks"] = False
    # The next holder; then the stale one.
    result["next_holder"] = chained_upload(blob, b"v41", 41, log)
    result["stale"] = chained_upload(blob, b"stale", 40, log)
    # SharedKey signs If-Match: the gateway cannot add it.
    keyed = BlobServiceClient(f"{gateway}/{ACCOUNT}", credential={"account_name": ACCOUNT, "account_key": KEY})
    keyed_blob = keyed.get_blob_client(container, "report")
    try:
        keyed_blob.upload_blob(b"keyed", overwrite=True, **fenced(41))
        result["shared_key"] = "put"
    except HttpResponseError as error:
        result["shared_key"] = error_code(error)
    result["log"] = log
    result["stored"] = behind.download_blob().readall().decode(errors="replace")[:16]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
