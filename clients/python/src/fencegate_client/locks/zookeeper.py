"""ZooKeeper: an ephemeral sequential node (kazoo's lock recipe); the token
is the node's ``czxid``, never its sequence suffix (a 32-bit counter of the
parent that wraps and restarts)."""

from __future__ import annotations

from typing import Any

from .base import FencedLock, LockTimeout

__all__ = ["ZooKeeperLock"]


class ZooKeeperLock(FencedLock):
    """``ZooKeeperLock(kazoo_client, "/locks/report")``, with a started
    ``KazooClient``.

    ``lost`` becomes true when the session is lost (expired: the ephemeral
    node, hence the lock, is gone) and, with ``suspended_is_lost=True`` (the
    default, as Curator advises), as soon as the connection is suspended: the
    session may expire without this client hearing of it.
    """

    def __init__(
        self,
        client: Any,
        path: str,
        *,
        identifier: str = "",
        acquire_timeout: float = 30.0,
        suspended_is_lost: bool = True,
    ):
        super().__init__(acquire_timeout)
        self.client = client
        self.path = path.rstrip("/")
        self.suspended_is_lost = suspended_is_lost
        self.node_path: str | None = None
        self._recipe = client.Lock(self.path, identifier)
        client.add_listener(self._state_listener)

    def _state_listener(self, state: str) -> bool:
        from kazoo.client import KazooState

        if self._token is None:
            return False
        if state == KazooState.LOST:
            self._mark_lost("ZooKeeper session lost: the lock node is gone")
        elif state == KazooState.SUSPENDED and self.suspended_is_lost:
            self._mark_lost("ZooKeeper connection suspended: the session may expire unseen")
        return False

    def _acquire(self, timeout: float) -> int:
        from kazoo.exceptions import LockTimeout as KazooLockTimeout

        try:
            granted = self._recipe.acquire(timeout=timeout)
        except KazooLockTimeout as error:
            raise LockTimeout(f"ZooKeeper lock {self.path} not granted within {timeout} s") from error
        if not granted:
            raise LockTimeout(f"ZooKeeper lock {self.path} not granted within {timeout} s")
        node = f"{self.path}/{self._recipe.node}"
        stat = self.client.exists(node)
        if stat is None:
            self._recipe.release()
            raise LockTimeout(f"lock node {node} gone right after the grant: the session expired")
        self.node_path = node
        return int(stat.czxid)

    def _release(self) -> None:
        self.node_path = None
        try:
            self._recipe.release()
        except Exception:  # session gone: its ephemeral node went with it
            pass

    def close(self) -> None:
        self.client.remove_listener(self._state_listener)
