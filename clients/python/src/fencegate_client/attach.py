"""Attaching the fencing token to what clients send.

A *token source* is an ``int``, a :class:`TokenHolder` (set ``.token`` at each
grant), or a lock of this kit: anything with a ``token`` attribute. The hooks
read it on every request, so one client can follow a holder across grants.
When the source can tell its lock is lost (a lock's ``lost``), every hook
refuses to send with :class:`~fencegate_client.errors.LockLost`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import requests

from .errors import LockLost, raise_for_fencing

__all__ = [
    "TOKEN_HEADER",
    "AZURE_TOKEN_HEADER",
    "TokenHolder",
    "TokenSource",
    "current_token",
    "headers",
    "FencedSession",
    "Boto3TokenHook",
    "fence_boto3",
    "AzureFencingPolicy",
    "presigned_url",
]

TOKEN_HEADER = "X-Fencing-Token"
AZURE_TOKEN_HEADER = "x-ms-fencing-token"


@runtime_checkable
class HasToken(Protocol):
    @property
    def token(self) -> int | None: ...


TokenSource = int | HasToken


class TokenHolder:
    """A plain, thread-shared holder of the current token (not a contextvar:
    boto3's transfer manager sends parts from threads that do not see the
    caller's context)."""

    def __init__(self, token: int | None = None):
        self.token: int | None = token


def _check_token(token: int) -> int:
    if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token <= 2**64 - 1:
        raise ValueError(f"a fencing token is an integer from 0 to 2**64-1, not {token!r}")
    return token


def current_token(source: TokenSource | None) -> int | None:
    """The token to send now, ``None`` if there is none; raises
    :class:`LockLost` if the source is a lock known to be lost."""
    if source is None:
        return None
    if isinstance(source, int):
        return _check_token(source)
    if getattr(source, "lost", False):
        raise LockLost()
    token = source.token
    return None if token is None else _check_token(token)


def headers(token: TokenSource, name: str = TOKEN_HEADER) -> dict[str, str]:
    """``{"X-Fencing-Token": "<token>"}`` for any HTTP client (``{}`` if the
    source holds no token)."""
    value = current_token(token)
    return {} if value is None else {name: str(value)}


class FencedSession(requests.Session):
    """A ``requests.Session`` that sends the token on every request.

    ``raise_for_fencing=True`` (the default) turns the gateway's refusals into
    the kit's exceptions (:class:`StaleToken`...) when the answer arrives. A
    request that passes its own token header keeps it (never sent twice).
    """

    def __init__(self, source: TokenSource, *, header: str = TOKEN_HEADER, raise_for_fencing: bool = True):
        super().__init__()
        self.source = source
        self.token_header = header
        self.raise_fencing = raise_for_fencing

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:
        given: Mapping[str, Any] = kwargs.get("headers") or {}
        if not any(str(key).lower() == self.token_header.lower() for key in given):
            merged = dict(given)
            merged.update(headers(self.source, self.token_header))
            kwargs["headers"] = merged
        response = super().request(method, url, *args, **kwargs)
        if self.raise_fencing:
            raise_for_fencing(response)
        return response


class Boto3TokenHook:
    """A ``before-sign.s3.*`` handler: the header is added before SigV4 signs
    the request, so it is among the signed headers.

    Presigned URLs are left alone (see :func:`presigned_url`).
    """

    def __init__(self, source: TokenSource, header: str = TOKEN_HEADER):
        self.source = source
        self.header = header

    def __call__(self, request: Any, **_: Any) -> None:
        context = getattr(request, "context", None) or {}
        if context.get("is_presign_request"):
            return
        token = current_token(self.source)
        if token is None:
            return
        if self.header in request.headers:
            del request.headers[self.header]  # a retry: replace, never twice
        request.headers[self.header] = str(token)


def fence_boto3(client: Any, source: TokenSource, header: str = TOKEN_HEADER) -> Boto3TokenHook:
    """Register a :class:`Boto3TokenHook` on an S3 client; returns it (its
    ``source`` may be changed later). One hook per client."""
    hook = Boto3TokenHook(source, header)
    client.meta.events.register("before-sign.s3.*", hook, unique_id="fencegate-client-token")
    return hook


def presigned_url(
    client: Any,
    method: str,
    params: Mapping[str, Any],
    expires_in: int = 3600,
    http_method: str | None = None,
) -> str:
    """A SigV4 presigned URL, *without* the token header.

    The URL's bearer (a browser, ``curl``, a partner) sends none of our
    headers: a token among the signed headers would make S3 (or the gateway
    under custody) refuse the URL for a bad signature. So the hook stays out of
    presigning. Through fencegate such a URL is an unfenced request: fine for a
    read (GET/HEAD are forwarded untouched); a presigned write is refused 428
    ``missing_token`` unless the gateway runs with ``--allow-unfenced-writes``,
    which is the point: the URL outlives the lock, so it must not carry the
    lock's token.

    The client must sign with SigV4 (``Config(signature_version="s3v4")``):
    SigV2 URLs carry no region or signed-header list, and the gateway under
    custody refuses them.
    """
    version = getattr(client.meta.config, "signature_version", None)
    if version not in (None, "s3v4", "v4"):
        raise ValueError(f"presign with signature_version='s3v4', not {version!r}")
    url: str = client.generate_presigned_url(
        ClientMethod=method, Params=dict(params), ExpiresIn=expires_in, HttpMethod=http_method
    )
    if "X-Amz-Algorithm=AWS4-HMAC-SHA256" not in url:
        raise ValueError("the client did not presign with SigV4: use Config(signature_version='s3v4')")
    return url


try:  # azure-core is optional
    from azure.core.pipeline.policies import SansIOHTTPPolicy as _AzurePolicyBase
except ImportError:  # pragma: no cover
    _AzurePolicyBase = object  # type: ignore[misc,assignment]


class AzureFencingPolicy(_AzurePolicyBase):  # type: ignore[type-arg]
    """An azure-core policy that sets ``x-ms-fencing-token`` on every request.

    Give it to a storage client as ``raw_request_hook=policy``: the storage
    SDKs run that hook just before their ``SharedKey`` policy, so the header is
    signed (the gateway runs with ``--token-header x-ms-fencing-token``). For
    other azure-core clients, ``per_call_policies=[policy]``.
    """

    def __init__(self, source: TokenSource, header: str = AZURE_TOKEN_HEADER):
        super().__init__()
        self.source = source
        self.header = header

    def on_request(self, request: Any) -> None:
        token = current_token(self.source)
        if token is not None:
            request.http_request.headers[self.header] = str(token)

    def __call__(self, request: Any) -> None:
        self.on_request(request)
