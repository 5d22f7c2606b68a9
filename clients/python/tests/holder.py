"""A lock holder in its own process, for tests/test_locks.py.

Usage: holder.py KIND SERVICE LOCK_NAME LEASE URL
Takes the lock, writes "from A" to URL through the gateway, prints
{"token": N, "status": S}, then waits for a line on stdin (the test freezes
it with SIGSTOP meanwhile, past its lease). On "write" it sends its late
write at once with the token it holds (as a process that was paused between
its own check and its write would) and prints what the gateway said, whether
it has learnt by now that its lock is lost, and whether the kit's session then
refuses to send.
"""

import json
import sys
import traceback

import requests

from fencegate_client import FencedSession, LockLost, fencing_error, headers


def make_lock(kind, service, name, lease):
    if kind == "redis":
        import redis

        from fencegate_client import RedisLock

        return RedisLock(redis.Redis.from_url(service), name, lease=lease, renew=True)
    if kind == "etcd":
        from fencegate_client import EtcdLock

        return EtcdLock(service, name, ttl=int(lease))
    if kind == "zookeeper":
        from kazoo.client import KazooClient

        from fencegate_client import ZooKeeperLock

        client = KazooClient(hosts=service, timeout=lease)
        client.start(timeout=15)
        return ZooKeeperLock(client, f"/locks/{name}")
    if kind == "postgres":
        from fencegate_client import PostgresLock

        return PostgresLock(service, name, lease=lease)
    raise SystemExit(f"unknown kind {kind}")


def say(**fields):
    print(json.dumps(fields), flush=True)


def main():
    kind, service, name, lease, url = sys.argv[1:6]
    lock = make_lock(kind, service, name, float(lease))
    token = lock.acquire(timeout=30)
    first = requests.put(url, data=b"from A", headers=headers(token), timeout=10)
    say(token=token, status=first.status_code)
    if sys.stdin.readline().strip() != "write":
        return
    late = requests.put(url, data=b"late from A", headers=headers(token), timeout=10)
    error = fencing_error(late)
    result = {
        "status": late.status_code,
        "error": type(error).__name__ if error else None,
        "token": getattr(error, "token", None),
        "highest": getattr(error, "highest", None),
        "resource": getattr(error, "resource", None),
    }
    result["lost"] = lock.wait_lost(10)
    result["lost_reason"] = lock.lost_reason
    try:
        FencedSession(lock).put(url, data=b"again from A", timeout=10)
        result["session"] = "sent"
    except LockLost:
        result["session"] = "LockLost"
    lock.release()
    say(**result)


if __name__ == "__main__":
    try:
        main()
    except Exception:
        say(fatal=traceback.format_exc())
