"""PostgreSQL: ``nextval`` of a sequence, taken under a session advisory lock.

The token is taken once the lock is granted (a value taken while waiting could
be below that of a holder that got the lock first). The lease is the server's
``idle_session_timeout`` (PostgreSQL 14 and later): a holder that stops talking
to the server for ``lease`` seconds (paused, partitioned) has its session ended
by the server, which releases the advisory lock; a heartbeat every ``lease/3``
keeps a running holder's session alive.
"""

from __future__ import annotations

import threading
import time
import zlib
from typing import Any

from .base import FencedLock, LockTimeout

__all__ = ["PostgresLock"]


class PostgresLock(FencedLock):
    """``PostgresLock(conninfo, "report", sequence="lock_tokens", lease=10)``.

    Opens its own connection (psycopg 3, autocommit) per grant: the session is
    the lock. ``lost`` becomes true when a heartbeat fails (the server ended
    the session) or when no heartbeat has succeeded for ``lease`` seconds.
    ``lease=None``: no timeout, no heartbeat (the lock lasts as long as the
    connection).
    """

    def __init__(
        self,
        conninfo: str,
        name: str,
        *,
        sequence: str = "fencegate_lock_tokens",
        lease: float | None = 10.0,
        acquire_timeout: float = 30.0,
        retry_interval: float = 0.05,
    ):
        super().__init__(acquire_timeout)
        self.conninfo = conninfo
        self.name = name
        self.sequence = sequence
        self.lease = lease
        self.retry_interval = retry_interval
        # pg_advisory_lock(int, int): one class for this kit, one key per name
        self.lock_key = zlib.crc32(name.encode()) - 2**31
        self.conn: Any = None
        self._conn_lock = threading.Lock()
        self._deadline = float("inf")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    LOCK_CLASS = 0x66656E63 - 2**31  # "fenc"

    def _acquire(self, timeout: float) -> int:
        import psycopg
        from psycopg import sql

        give_up = time.monotonic() + timeout
        conn = psycopg.connect(self.conninfo, autocommit=True, connect_timeout=max(1, int(timeout)))
        try:
            conn.execute(sql.SQL("CREATE SEQUENCE IF NOT EXISTS {}").format(sql.Identifier(self.sequence)))
            if self.lease is not None:
                if conn.info.server_version < 140000:
                    raise RuntimeError("a lease needs PostgreSQL 14 or later (idle_session_timeout); use lease=None")
                conn.execute(
                    sql.SQL("SET idle_session_timeout = {}").format(sql.Literal(f"{int(self.lease * 1000)}ms"))
                )
            while True:
                started = time.monotonic()
                row = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (self.LOCK_CLASS, self.lock_key)).fetchone()
                if row is not None and row[0]:
                    break
                left = give_up - time.monotonic()
                if left <= 0:
                    raise LockTimeout(f"PostgreSQL lock {self.name!r} not granted within {timeout} s")
                time.sleep(min(self.retry_interval, left))
            token_row = conn.execute(
                sql.SQL("SELECT nextval({}::regclass)").format(
                    sql.Literal(sql.Identifier(self.sequence).as_string(conn))
                )
            ).fetchone()
            assert token_row is not None
            token = int(token_row[0])
        except BaseException:
            conn.close()
            raise
        self.conn = conn
        if self.lease is not None:
            self._deadline = started + self.lease
            self._stop.clear()
            self._thread = threading.Thread(target=self._heartbeat_loop, name="postgres-lock-heartbeat", daemon=True)
            self._thread.start()
        return token

    def heartbeat(self) -> bool:
        """One round trip on the lock's session; false (and ``lost``) if it is gone."""
        conn = self.conn
        if conn is None:
            return False
        started = time.monotonic()
        try:
            with self._conn_lock:
                conn.execute("SELECT 1")
        except Exception as error:
            self._mark_lost(f"the lock's session ended: {error}".strip())
            return False
        if self.lease is not None:
            self._deadline = started + self.lease
        return True

    def _heartbeat_loop(self) -> None:
        assert self.lease is not None
        while not self._stop.wait(self.lease / 3):
            if not self.heartbeat():
                return

    def _check_lost(self) -> None:
        if time.monotonic() >= self._deadline:
            self._mark_lost("no heartbeat for a whole lease: the server may have ended the session")

    def _release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        conn, self.conn = self.conn, None
        self._deadline = float("inf")
        if conn is None:
            return
        try:
            with self._conn_lock:
                conn.execute("SELECT pg_advisory_unlock(%s, %s)", (self.LOCK_CLASS, self.lock_key))
        except Exception:
            pass  # the session is gone, and its lock with it
        finally:
            conn.close()
