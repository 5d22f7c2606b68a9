"""Each lock on its real service: tokens grow from grant to grant, and a
holder frozen past its lease is fenced off by the gateway once the next
holder (with a higher token) has written."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from fencegate_client import (
    EtcdLock,
    FencedLock,
    LockLost,
    LockTimeout,
    PostgresLock,
    RedisLock,
    StaleToken,
    ZooKeeperLock,
    fenced,
    headers,
    raise_for_fencing,
)

LEASE = {"redis": "1", "etcd": "2", "zookeeper": "2", "postgres": "1.5"}


@pytest.fixture
def service(request: pytest.FixtureRequest) -> str:
    kind = request.param
    fixture = {
        "redis": "redis_url",
        "etcd": "etcd_url",
        "zookeeper": "zookeeper_hosts",
        "postgres": "postgres_conninfo",
    }[kind]
    return str(request.getfixturevalue(fixture))


@pytest.fixture
def make_lock(request: pytest.FixtureRequest) -> Iterator[Callable[..., FencedLock]]:
    """``make_lock(kind, service, name, lease)``: a lock in this process."""
    cleanups: list[Callable[[], None]] = []

    def make(kind: str, service: str, name: str, lease: float = 5.0) -> FencedLock:
        if kind == "redis":
            import redis

            client = redis.Redis.from_url(service)
            cleanups.append(client.close)
            return RedisLock(client, name, lease=lease, renew=True)
        if kind == "etcd":
            return EtcdLock(service, name, ttl=max(1, int(lease)))
        if kind == "zookeeper":
            from kazoo.client import KazooClient

            zk = KazooClient(hosts=service, timeout=max(2.0, lease))
            zk.start(timeout=15)
            cleanups.append(lambda: (zk.stop(), zk.close()))
            return ZooKeeperLock(zk, f"/locks/{name}")
        if kind == "postgres":
            return PostgresLock(service, name, lease=lease)
        raise AssertionError(kind)

    yield make
    for cleanup in reversed(cleanups):
        cleanup()


KINDS = ["redis", "etcd", "zookeeper", "postgres"]


@pytest.mark.parametrize(("kind", "service"), [pytest.param(k, k, id=k) for k in KINDS], indirect=["service"])
def test_tokens_grow_and_the_lock_excludes(kind: str, service: str, make_lock: Callable[..., FencedLock]) -> None:
    name = f"grow-{kind}"
    first = make_lock(kind, service, name)
    second = make_lock(kind, service, name)
    with first as held:
        token_one = held.token
        assert token_one > 0 and not held.lost
        with pytest.raises(LockTimeout):
            second.acquire(timeout=0.5)
        assert not second.held
    assert not first.held
    with second as held:
        assert held.token > token_one
        assert held.check() == held.token


def _params() -> list[Any]:
    return [pytest.param(kind, kind, id=kind) for kind in KINDS]


@pytest.mark.parametrize(("kind", "service"), _params(), indirect=["service"])
def test_a_holder_paused_past_its_lease_is_refused(
    kind: str,
    service: str,
    gateway: Callable[..., Any],
    holder: Callable[..., Any],
    make_lock: Callable[..., FencedLock],
) -> None:
    gw = gateway()
    url = f"{gw.url}/reports/{kind}.csv"
    name = f"paused-{kind}"

    # A takes the lock and writes.
    a = holder(kind, service, name, LEASE[kind], url)
    first = a.read(timeout=60)
    assert first["status"] in (200, 201, 204), first
    a_token = first["token"]

    # A freezes (a GC pause, a stopped VM) past its lease...
    a.freeze()
    started = time.monotonic()
    # ... so B gets the lock once the lease (or session) expires: a higher token.
    b = make_lock(kind, service, name, 5.0)
    with fenced(b, timeout=60) as session:
        waited = time.monotonic() - started
        assert b.token > a_token, (b.token, a_token)
        assert session.put(url, data=b"from B", timeout=10).status_code in (200, 201, 204)
        b_token = b.token

        # A wakes up and sends its late write with its old token: refused.
        a.thaw()
        a.send("write")
        late = a.read(timeout=60)
    assert late["status"] == 409, late
    assert late["error"] == "StaleToken", late
    assert late["token"] == a_token and late["highest"] == b_token, late
    assert late["resource"] == f"/reports/{kind}.csv"
    # ... and A learns its lock is lost, after which the kit refuses to send.
    assert late["lost"] is True, late
    assert late["session"] == "LockLost", late
    assert requests.get(url, timeout=10).content == b"from B"
    assert waited < 45

    # The same late write from this process, through the kit's exceptions.
    with pytest.raises(StaleToken) as raised:
        raise_for_fencing(requests.put(url, data=b"x", headers=headers(a_token), timeout=10))
    assert raised.value.highest == b_token and raised.value.token == a_token


def test_redis_lost_once_the_lease_runs_out(redis_url: str, gateway: Callable[..., Any]) -> None:
    import redis

    gw = gateway()
    client = redis.Redis.from_url(redis_url)
    lock = RedisLock(client, "short", lease=0.3)  # no renewal
    with fenced(lock) as session:
        assert session.put(f"{gw.url}/short", data=b"1", timeout=10).status_code in (200, 201, 204)
        assert lock.wait_lost(5)
        with pytest.raises(LockLost):
            session.put(f"{gw.url}/short", data=b"2", timeout=10)
    assert requests.get(f"{gw.url}/short", timeout=10).content == b"1"
    client.close()
