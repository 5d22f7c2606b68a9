"""Retrying chained writes (``--conditional-writes``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from .errors import FencingError, StaleToken, VersionConflict, VersionUnknown, fencing_error

__all__ = ["retry_chained"]

T = TypeVar("T")


def retry_chained(
    write: Callable[[], T],
    head: Callable[[], object],
    *,
    attempts: int = 3,
) -> T:
    """Run ``write``; on ``version_unknown``, or ``version_conflict`` with
    ``retry`` true, send the fenced ``head`` (it makes the gateway observe the
    object's version; a 404 is fine: *absent* is a version) and write again, at
    most ``attempts`` writes in all.

    :class:`StaleToken` and ``version_conflict`` with ``retry`` false are never
    retried: the lock has moved on, take it again. ``write`` and ``head`` may
    raise the kit's exceptions or an SDK's (``ClientError``,
    ``HttpResponseError``, which are read with
    :func:`~fencegate_client.errors.fencing_error`); ``head`` should not raise
    for a 404.
    """
    if attempts < 1:
        raise ValueError("attempts >= 1")
    for attempt in range(1, attempts + 1):
        try:
            return write()
        except Exception as error:
            fencing = fencing_error(error)
            if fencing is None:
                raise
            retryable = isinstance(fencing, VersionUnknown) or (
                isinstance(fencing, VersionConflict) and fencing.retry
            )
            if isinstance(fencing, StaleToken) or not retryable or attempt == attempts:
                if fencing is error:
                    raise
                raise fencing from error
        head()
    raise AssertionError("unreachable")  # pragma: no cover


def is_retryable(error: BaseException) -> bool:
    """Whether :func:`retry_chained` would retry after ``error``."""
    fencing: FencingError | None = fencing_error(error)
    return isinstance(fencing, VersionUnknown) or (isinstance(fencing, VersionConflict) and fencing.retry)
