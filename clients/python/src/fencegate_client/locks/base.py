"""What every lock of the kit has in common."""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Self

from ..errors import FencingError, LockLost

__all__ = ["FencedLock", "LockTimeout", "LockNotHeld"]


class LockTimeout(FencingError):
    """The lock was not granted within the acquire timeout."""

    code = "lock_timeout"


class LockNotHeld(FencingError):
    """``token`` was read while the lock is not held."""

    code = "lock_not_held"


class FencedLock:
    """A lock that hands out a fencing token at each grant.

    ``with lock: ...`` acquires (waiting at most ``acquire_timeout`` seconds)
    and releases. ``token`` is the grant's token; ``lost`` becomes true once the
    lock is known to be lost (lease or session expired, heartbeat failed) and
    stays true until the next grant. ``lost`` false is no promise: a paused
    process learns nothing until it runs again, which is why the gateway checks
    the token.
    """

    def __init__(self, acquire_timeout: float = 30.0):
        self.acquire_timeout = acquire_timeout
        self._token: int | None = None
        self._lost = threading.Event()
        self._lost_reason: str | None = None

    # -- what subclasses implement
    def _acquire(self, timeout: float) -> int:
        raise NotImplementedError

    def _release(self) -> None:
        raise NotImplementedError

    def _check_lost(self) -> None:
        """Called by ``lost``: mark the lock lost if it can tell cheaply."""

    # -- the public face
    @property
    def held(self) -> bool:
        return self._token is not None

    @property
    def token(self) -> int:
        if self._token is None:
            raise LockNotHeld("the lock is not held: no token")
        return self._token

    @property
    def lost(self) -> bool:
        if self._token is not None and not self._lost.is_set():
            self._check_lost()
        return self._lost.is_set()

    @property
    def lost_reason(self) -> str | None:
        return self._lost_reason

    def _mark_lost(self, reason: str) -> None:
        if not self._lost.is_set():
            self._lost_reason = reason
            self._lost.set()

    def wait_lost(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for the lock to be known lost."""
        deadline = time.monotonic() + timeout
        while True:
            if self.lost:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._lost.wait(min(left, 0.05))

    def check(self) -> int:
        """The token, or :class:`LockLost` if the lock is known lost."""
        if self.lost:
            raise LockLost(f"the lock is lost ({self._lost_reason}): take it again for a new token")
        return self.token

    def acquire(self, timeout: float | None = None) -> int:
        if self._token is not None:
            raise RuntimeError("this lock object is already held; use another object per holder")
        self._lost.clear()
        self._lost_reason = None
        token = self._acquire(self.acquire_timeout if timeout is None else timeout)
        self._token = token
        return token

    def release(self) -> None:
        """Release the lock (safe when it is already lost)."""
        if self._token is None:
            return
        try:
            self._release()
        finally:
            self._token = None

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
