"""Redis: ``SET NX PX`` and ``INCR`` in one Lua script (examples/redis_lock.rs)."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from .base import FencedLock, LockTimeout

__all__ = ["RedisLock"]

# KEYS[1] = lock key, KEYS[2] = token counter; ARGV[1] = owner, ARGV[2] = lease in ms.
ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('INCR', KEYS[2])}
end
return {0, redis.call('PTTL', KEYS[1])}
"""

EXTEND = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class RedisLock(FencedLock):
    """A single-instance Redis lock whose token is an ``INCR`` made in the
    same script as the ``SET NX PX`` that grants it.

    ``lease`` (seconds) is the key's ``PX``. With ``renew=True`` a thread
    extends it every ``lease / 3`` while held (if an extension finds the key
    gone or owned by another, the lock is lost). ``lost`` is also true once the
    lease, counted from *before* the acquire call, has run out unrenewed: past
    that moment another holder may have it.

    Run Redis with ``appendonly yes`` and ``appendfsync always``: a counter that
    restarts from nothing sends tokens backwards (docs/CLIENTS.md, section 4).
    """

    def __init__(
        self,
        client: Any,
        name: str,
        *,
        lease: float = 10.0,
        renew: bool = False,
        token_key: str | None = None,
        acquire_timeout: float = 30.0,
        retry_interval: float = 0.05,
    ):
        super().__init__(acquire_timeout)
        self.client = client
        self.lock_key = f"lock:{name}"
        self.token_key = token_key or f"lock:{name}:token"
        self.lease = lease
        self.renew = renew
        self.retry_interval = retry_interval
        self.owner = uuid.uuid4().hex
        self._deadline = 0.0
        self._acquire_script = client.register_script(ACQUIRE)
        self._extend_script = client.register_script(EXTEND)
        self._release_script = client.register_script(RELEASE)
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    @property
    def _lease_ms(self) -> int:
        return max(1, int(self.lease * 1000))

    def _acquire(self, timeout: float) -> int:
        give_up = time.monotonic() + timeout
        while True:
            started = time.monotonic()
            granted, value = self._acquire_script(keys=[self.lock_key, self.token_key], args=[self.owner, self._lease_ms])
            if int(granted) == 1:
                self._deadline = started + self.lease
                if self.renew:
                    self._stop.clear()
                    self._renewer = threading.Thread(target=self._renew_loop, name="redis-lock-renew", daemon=True)
                    self._renewer.start()
                return int(value)
            left = give_up - time.monotonic()
            if left <= 0:
                raise LockTimeout(f"{self.lock_key} not granted within {timeout} s")
            # PTTL: -1 no expiry, -2 just released
            wait = int(value) / 1000 if int(value) > 0 else self.retry_interval
            time.sleep(max(0.001, min(wait, self.retry_interval, left)))

    def extend(self) -> bool:
        """Extend the lease by ``lease``; false (and ``lost``) if it is gone."""
        started = time.monotonic()
        try:
            ok = int(self._extend_script(keys=[self.lock_key], args=[self.owner, self._lease_ms])) == 1
        except Exception as error:  # connection trouble: the lease runs on
            if time.monotonic() >= self._deadline:
                self._mark_lost(f"lease expired, renewal failed: {error}")
            return False
        if ok:
            self._deadline = started + self.lease
        else:
            self._mark_lost("lease expired: the lock key is gone or owned by another holder")
        return ok

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.lease / 3):
            if self._lost.is_set() or not self.extend():
                if self._lost.is_set():
                    return

    def _check_lost(self) -> None:
        if time.monotonic() >= self._deadline:
            self._mark_lost("lease expired")

    def _release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=self.lease)
            self._renewer = None
        self._release_script(keys=[self.lock_key], args=[self.owner])
