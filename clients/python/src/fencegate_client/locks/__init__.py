"""Locks that hand out a fencing token at each grant."""

from .base import FencedLock, LockNotHeld, LockTimeout
from .etcd import EtcdLock
from .postgres import PostgresLock
from .redis import RedisLock
from .zookeeper import ZooKeeperLock

__all__ = ["FencedLock", "LockNotHeld", "LockTimeout", "EtcdLock", "PostgresLock", "RedisLock", "ZooKeeperLock"]
