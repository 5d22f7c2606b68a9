"""etcd: the create revision of the lock key, under a lease kept alive.

Speaks etcd's v3 JSON API (the gRPC gateway under ``/v3/...``) with
``requests``: no gRPC dependency. As examples/etcd_lock.rs: lease grant, a
keep-alive every TTL/3, ``/v3/lock/lock`` with the lease, then the token is the
``create_revision`` of the returned key (``/v3/kv/range``). The lock goes to
the lowest create revision, so each grant's token is above every earlier
holder's.
"""

from __future__ import annotations

import base64
import threading
import time
from typing import Any

import requests

from .base import FencedLock, LockTimeout

__all__ = ["EtcdLock"]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


class EtcdError(RuntimeError):
    pass


class EtcdLock(FencedLock):
    """``EtcdLock("http://127.0.0.1:2379", "report", ttl=10)``.

    ``ttl`` (whole seconds, etcd's unit) is the lease. ``lost`` becomes true
    when a keep-alive finds the lease gone, or when no keep-alive has succeeded
    for a whole TTL (a paused process knows it at once on waking). Pass
    ``keepalive=False`` to manage the lease yourself (:meth:`keep_alive`).
    """

    def __init__(
        self,
        endpoint: str,
        name: str,
        *,
        ttl: int = 10,
        keepalive: bool = True,
        acquire_timeout: float = 30.0,
        session: requests.Session | None = None,
        request_timeout: float = 5.0,
    ):
        super().__init__(acquire_timeout)
        if ttl < 1:
            raise ValueError("etcd leases last whole seconds: ttl >= 1")
        self.endpoint = endpoint.rstrip("/")
        self.name = name
        self.ttl = ttl
        self.keepalive = keepalive
        self.http = session or requests.Session()
        self.request_timeout = request_timeout
        self.lease_id: int | None = None
        self.key: bytes | None = None
        self._deadline = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _call(self, path: str, body: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        reply = self.http.post(self.endpoint + path, json=body, timeout=timeout or self.request_timeout)
        if reply.status_code != 200:
            raise EtcdError(f"etcd {path}: {reply.status_code} {reply.text.strip()}")
        answer: dict[str, Any] = reply.json()
        return answer

    def _acquire(self, timeout: float) -> int:
        started = time.monotonic()
        grant = self._call("/v3/lease/grant", {"TTL": str(self.ttl)})
        lease = _int(grant.get("ID"))
        if lease == 0:
            raise EtcdError(f"lease grant: {grant}")
        self.lease_id = lease
        self._deadline = started + _int(grant.get("TTL"))
        self._stop.clear()
        if self.keepalive:
            self._thread = threading.Thread(target=self._keepalive_loop, name="etcd-lease-keepalive", daemon=True)
            self._thread.start()
        try:
            try:
                locked = self._call(
                    "/v3/lock/lock",
                    {"name": _b64(self.name.encode()), "lease": str(lease)},
                    timeout=max(timeout, 0.001),
                )
            except requests.Timeout as error:
                raise LockTimeout(f"etcd lock {self.name!r} not granted within {timeout} s") from error
            key_b64 = locked.get("key", "")
            self.key = base64.b64decode(key_b64)
            kvs = self._call("/v3/kv/range", {"key": key_b64}).get("kvs") or []
            if not kvs:
                raise EtcdError(f"lock key {self.key!r} vanished before it was read: the lease expired")
            return _int(kvs[0].get("create_revision"))
        except BaseException:
            self._end_lease()
            raise

    def keep_alive(self) -> bool:
        """One keep-alive; false (and ``lost``) if etcd no longer knows the lease."""
        if self.lease_id is None:
            return False
        started = time.monotonic()
        try:
            answer = self._call("/v3/lease/keepalive", {"ID": str(self.lease_id)})
        except (requests.RequestException, EtcdError, ValueError):
            self._check_lost()
            return False
        ttl = _int((answer.get("result") or {}).get("TTL"))
        if ttl <= 0:
            self._mark_lost(f"lease {self.lease_id:x} expired")
            return False
        self._deadline = started + ttl
        return True

    def _keepalive_loop(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            self.keep_alive()
            if self._lost.is_set():
                return

    def _check_lost(self) -> None:
        if time.monotonic() >= self._deadline:
            self._mark_lost(f"no keep-alive of lease {self.lease_id or 0:x} for its whole TTL")

    def _end_lease(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.request_timeout)
        self._thread = None
        if self.lease_id is not None:
            try:  # revoking deletes the lock key (attached to the lease)
                self._call("/v3/lease/revoke", {"ID": str(self.lease_id)})
            except (requests.RequestException, EtcdError):
                pass
        self.lease_id = None
        self.key = None

    def _release(self) -> None:
        self._end_lease()
