"""The gateway's refusals as Python exceptions.

fencegate answers in three shapes (SPEC "Data plane" and "Credential custody"):

* JSON (`--store http`/`webdav`, the default): ``{"error": "stale_token", ...}``;
* an S3 error document (`--store s3`):
  ``<Error><Code>stale_token</Code><Resource>..</Resource><Token>..</Token>...``,
  which botocore turns into a ``ClientError``;
* Azure's error shape (`--store azure`): the same XML plus the header
  ``x-ms-error-code: stale_token``, which azure-core turns into an
  ``HttpResponseError``.

:func:`fencing_error` reads any of them and returns the matching exception (or
``None`` when the answer is not a fencing refusal); :func:`raise_for_fencing`
raises it.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping
from typing import Any

__all__ = [
    "FencingError",
    "StaleToken",
    "VersionConflict",
    "VersionUnknown",
    "MissingToken",
    "LockLost",
    "fencing_error",
    "raise_for_fencing",
    "parse_answer",
]

HIGHEST_HEADER = "X-Fencing-Highest"


class FencingError(Exception):
    """Base of every fencing refusal (and of :class:`LockLost`).

    ``code`` is the SPEC's error name (``stale_token``...), ``status`` the HTTP
    status when the error came from an answer, ``body`` the answer's fields.
    """

    code: str = "fencing_error"

    def __init__(self, message: str, *, status: int | None = None, body: Mapping[str, Any] | None = None):
        super().__init__(message)
        self.status = status
        self.body: dict[str, Any] = dict(body or {})


class StaleToken(FencingError):
    """409 ``stale_token``: a higher token was admitted for ``resource``.

    The lock is gone. Never retry, and never send ``highest + 1``: take the lock
    again for a new token (docs/CLIENTS.md, section 5).
    """

    code = "stale_token"

    def __init__(
        self,
        token: int | None,
        highest: int | None,
        resource: str | None,
        *,
        reason: str | None = None,
        status: int | None = 409,
        body: Mapping[str, Any] | None = None,
    ):
        super().__init__(
            f"stale fencing token {token} for {resource}: the highest admitted is {highest}"
            + (f" ({reason})" if reason else ""),
            status=status,
            body=body,
        )
        self.token = token
        self.highest = highest
        self.resource = resource
        self.reason = reason


class VersionConflict(FencingError):
    """409 ``version_conflict`` (``--conditional-writes``).

    ``retry`` true: the object changed under a write the gateway did not see; a
    fenced ``HEAD`` then the same write goes through. ``retry`` false: a higher
    token was admitted meanwhile, the lock has moved on (as :class:`StaleToken`).
    """

    code = "version_conflict"

    def __init__(
        self,
        resource: str | None,
        object: str | None,  # noqa: A002 - the SPEC's field name
        token: int | None,
        retry: bool,
        *,
        status: int | None = 409,
        body: Mapping[str, Any] | None = None,
    ):
        super().__init__(
            f"version conflict on {object} (fence {resource}, token {token}, retry={retry})",
            status=status,
            body=body,
        )
        self.resource = resource
        self.object = object
        self.token = token
        self.retry = retry


class VersionUnknown(FencingError):
    """428 ``version_unknown`` (``--chain-observe client-head``): send a fenced
    ``HEAD`` of ``object`` first, then the same write again."""

    code = "version_unknown"

    def __init__(
        self,
        resource: str | None,
        object: str | None,  # noqa: A002
        *,
        status: int | None = 428,
        body: Mapping[str, Any] | None = None,
    ):
        super().__init__(f"version of {object} unknown (fence {resource}): HEAD it first", status=status, body=body)
        self.resource = resource
        self.object = object


class MissingToken(FencingError):
    """428 ``missing_token``: a write went out without the token header."""

    code = "missing_token"

    def __init__(self, resource: str | None, *, status: int | None = 428, body: Mapping[str, Any] | None = None):
        super().__init__(f"write to {resource} carried no fencing token", status=status, body=body)
        self.resource = resource


class LockLost(FencingError):
    """Raised by the kit itself, before anything is sent, once a lock is known
    to be lost (lease expired, session expired, heartbeat failed)."""

    code = "lock_lost"

    def __init__(self, message: str = "the lock is lost: take it again for a new token"):
        super().__init__(message)


class GatewayError(FencingError):
    """Any other answer the gateway made itself (``invalid_token``,
    ``fence_store_unavailable``...): ``code`` is the SPEC's error name."""

    def __init__(self, code: str, message: str, *, status: int | None = None, body: Mapping[str, Any] | None = None):
        super().__init__(f"{code}: {message}" if message else code, status=status, body=body)
        self.code = code


# The gateway's own error names (SPEC "Responses made by the gateway itself").
GATEWAY_CODES = frozenset(
    {
        "invalid_token",
        "invalid_path",
        "stale_token",
        "missing_token",
        "unfenceable_write",
        "version_conflict",
        "version_unknown",
        "precondition_not_chainable",
        "unchainable_write",
        "version_unavailable",
        "unauthenticated",
        "forbidden",
        "no_route",
        "upstream_credentials_rejected",
        "token_not_issued",
        "request_header_too_large",
        "upstream_unavailable",
        "fence_store_unavailable",
        "token_issuer_unavailable",
        "upstream_timeout",
    }
)


def _int(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() == "true"


def _xml_fields(text: str) -> dict[str, Any]:
    """The children of an ``<Error>`` document, keys lowercased (``Code`` ->
    ``error``)."""
    try:
        root = ElementTree.fromstring(text.strip().encode())
    except ElementTree.ParseError:
        return {}
    if root.tag != "Error":
        return {}
    fields: dict[str, Any] = {}
    for child in root:
        name = child.tag.lower()
        fields["error" if name == "code" else name] = (child.text or "").strip()
    return fields


def parse_answer(body: bytes | str | None, content_type: str | None = None) -> dict[str, Any]:
    """The fields of a gateway answer's body, JSON or XML; ``{}`` if neither."""
    if body is None:
        return {}
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            value = json.loads(stripped)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}
    if stripped.startswith("<"):
        return _xml_fields(stripped)
    return {}


def from_fields(
    fields: Mapping[str, Any], status: int | None = None, headers: Mapping[str, str] | None = None
) -> FencingError | None:
    """The exception for an answer's fields, ``None`` if it is no fencing refusal."""
    code = fields.get("error")
    if not isinstance(code, str) or code not in GATEWAY_CODES:
        return None
    resource = fields.get("resource")
    obj = fields.get("object")
    if code == "stale_token":
        highest = _int(fields.get("highest"))
        if highest is None and headers is not None:
            highest = _int(_header(headers, HIGHEST_HEADER))
        return StaleToken(
            _int(fields.get("token")), highest, resource, reason=fields.get("reason"), status=status, body=fields
        )
    if code == "version_conflict":
        return VersionConflict(
            resource, obj, _int(fields.get("token")), _bool(fields.get("retry")), status=status, body=fields
        )
    if code == "version_unknown":
        return VersionUnknown(resource, obj, status=status, body=fields)
    if code == "missing_token":
        return MissingToken(resource, status=status, body=fields)
    message = fields.get("detail") or fields.get("message") or ""
    return GatewayError(code, str(message), status=status, body=fields)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is not None:
        return value
    lowered = name.lower()
    for key, item in headers.items():
        if key.lower() == lowered:
            return item
    return None


def _from_requests(response: Any) -> FencingError | None:
    if response.status_code < 400:
        return None
    fields = parse_answer(response.content, response.headers.get("Content-Type"))
    code = response.headers.get("x-ms-error-code")
    if code and "error" not in fields:
        fields["error"] = code
    return from_fields(fields, response.status_code, response.headers)


def _from_client_error(error: Any) -> FencingError | None:
    response: Mapping[str, Any] = getattr(error, "response", None) or {}
    err = dict(response.get("Error") or {})
    meta = response.get("ResponseMetadata") or {}
    status = _int(meta.get("HTTPStatusCode"))
    headers = meta.get("HTTPHeaders") or {}
    fields: dict[str, Any] = {k.lower(): v for k, v in err.items()}
    if "code" in fields:
        fields["error"] = fields.pop("code")
    if fields.get("error") not in GATEWAY_CODES:
        # A gateway answer botocore could not read (JSON, when the gateway does
        # not run with --store s3): the body is gone, but the status and the
        # X-Fencing-Highest header remain.
        if status == 409 and _header(headers, HIGHEST_HEADER) is not None:
            return StaleToken(None, _int(_header(headers, HIGHEST_HEADER)), None, status=status, body=fields)
        return None
    return from_fields(fields, status, headers)


def _from_azure_error(error: Any) -> FencingError | None:
    response = getattr(error, "response", None)
    fields: dict[str, Any] = {}
    status = _int(getattr(error, "status_code", None))
    headers: Mapping[str, str] = {}
    if response is not None:
        headers = response.headers
        status = _int(response.status_code)
        try:
            fields = parse_answer(response.text())
        except Exception:  # a streamed body already consumed
            fields = {}
    code = getattr(error, "error_code", None) or _header(headers, "x-ms-error-code")
    if code and fields.get("error") not in GATEWAY_CODES:
        fields["error"] = code
    return from_fields(fields, status, headers)


def fencing_error(answer: Any) -> FencingError | None:
    """The fencing exception carried by ``answer``, or ``None``.

    ``answer`` is a ``requests.Response``, a botocore ``ClientError``, an
    azure-core ``HttpResponseError`` (or anything with ``.response`` holding an
    azure-core response), or a :class:`FencingError` (returned as is).
    """
    if isinstance(answer, FencingError):
        return answer
    if hasattr(answer, "status_code") and hasattr(answer, "content") and hasattr(answer, "headers"):
        return _from_requests(answer)
    response = getattr(answer, "response", None)
    if isinstance(response, Mapping):
        return _from_client_error(answer)
    if response is not None or hasattr(answer, "error_code"):
        return _from_azure_error(answer)
    return None


def raise_for_fencing(answer: Any) -> None:
    """Raise the fencing exception ``answer`` carries; return if it carries none.

    With a ``ClientError`` or ``HttpResponseError`` in an ``except`` block, use
    ``raise_for_fencing(error)`` then ``raise``: the fencing exception is raised
    ``from`` the SDK's, and other errors go on as they were.
    """
    error = fencing_error(answer)
    if error is None:
        return
    if isinstance(answer, BaseException) and answer is not error:
        raise error from answer
    raise error
