"""``fenced(lock)``: acquire, hand out a token-attached client, release."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .attach import TOKEN_HEADER, FencedSession, fence_boto3
from .locks.base import FencedLock

__all__ = ["fenced", "fenced_boto3"]


@contextmanager
def fenced(
    lock: FencedLock,
    *,
    timeout: float | None = None,
    header: str = TOKEN_HEADER,
    raise_for_fencing: bool = True,
) -> Iterator[FencedSession]:
    """``with fenced(lock) as session: session.put(url, data=...)``.

    Acquires ``lock`` (at most ``timeout`` seconds), yields a
    :class:`FencedSession` that sends the grant's token on every request and
    refuses to send anything (:class:`LockLost`) once the lock is known lost,
    and releases the lock on the way out, whatever happened.
    """
    lock.acquire(timeout)
    try:
        with FencedSession(lock, header=header, raise_for_fencing=raise_for_fencing) as session:
            yield session
    finally:
        lock.release()


@contextmanager
def fenced_boto3(lock: FencedLock, client: Any, *, timeout: float | None = None, header: str = TOKEN_HEADER) -> Iterator[Any]:
    """As :func:`fenced`, for a boto3 S3 client: the client carries the token
    (signed) while the lock is held, and refuses to send once it is lost.
    The hook is removed on the way out."""
    lock.acquire(timeout)
    hook = fence_boto3(client, lock, header)
    try:
        yield client
    finally:
        client.meta.events.unregister("before-sign.s3.*", hook, unique_id="fencegate-client-token")
        lock.release()
