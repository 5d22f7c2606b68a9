"""Real servers for the tests, each started here on a free 127.0.0.1 port and
stopped at the end: redis-server, etcd, ZooKeeper, PostgreSQL, moto's S3
server, Azurite and the fencegate gateway itself (``FENCEGATE_BIN``, default
target/debug/fencegate). Every wait is bounded."""

from __future__ import annotations

import glob
import os
import pwd
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

REPO = Path(__file__).resolve().parents[3]
VENV = Path(os.environ.get("FENCEGATE_VENV", REPO / "target/venv"))
FENCEGATE_BIN = os.environ.get("FENCEGATE_BIN", str(REPO / "target/debug/fencegate"))
ZK_JAR = "/usr/share/java/zookeeper.jar"
ZK_LOGGER_JAR = "/usr/share/java/slf4j-simple.jar"
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(what: str, timeout: float, ready: Callable[[], bool], proc: subprocess.Popen[Any] | None = None) -> None:
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before it was ready")
        try:
            if ready():
                return
        except Exception as error:  # not yet
            last = error
        time.sleep(0.1)
    raise TimeoutError(f"{what} not ready within {timeout} s (last: {last!r})")


def tcp_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Server:
    """A process this test run started, in its own process group."""

    name: str
    proc: subprocess.Popen[Any]
    dir: str | None = None
    lines: queue.Queue[str] = field(default_factory=queue.Queue)

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=10)
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)


def spawn(name: str, args: list[str], *, dir: str | None = None, stdout_lines: bool = False, **kwargs: Any) -> Server:
    proc = subprocess.Popen(
        args,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if stdout_lines else subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        process_group=0,
        text=True,
        **kwargs,
    )
    server = Server(name, proc, dir)
    if stdout_lines:
        assert proc.stdout is not None
        out = proc.stdout

        def pump() -> None:
            for line in out:
                server.lines.put(line)

        threading.Thread(target=pump, daemon=True).start()
    return server


def require(path: str) -> str:
    found = shutil.which(path) if "/" not in path else (path if os.path.exists(path) else None)
    if not found:
        pytest.fail(f"{path} is missing: run scripts/install-deps.sh")
    return found


# --- the gateway --------------------------------------------------------------


@dataclass
class Gateway:
    url: str
    admin: str
    server: Server


def start_gateway(args: list[str], *, dir: str | None = None, **kwargs: Any) -> Gateway:
    """Spawn ``FENCEGATE_BIN`` with ``args`` (``kwargs`` go to
    :func:`spawn`: ``cwd``, ``env``) and wait, at most 30 s, for the two
    addresses it prints. ``dir`` is removed when the server stops."""
    if not os.path.exists(FENCEGATE_BIN):
        # another build may be replacing it: wait a little
        wait_until(f"{FENCEGATE_BIN} to exist", 120, lambda: os.path.exists(FENCEGATE_BIN))
    server = spawn("fencegate", [FENCEGATE_BIN, *args], dir=dir, stdout_lines=True, **kwargs)
    data_addr = admin_addr = None
    deadline = time.monotonic() + 30
    while data_addr is None or admin_addr is None:
        left = deadline - time.monotonic()
        if left <= 0 or server.proc.poll() is not None:
            server.stop()
            raise RuntimeError(f"fencegate did not start (exit {server.proc.poll()}): {args}")
        try:
            line = server.lines.get(timeout=min(left, 0.5))
        except queue.Empty:
            continue
        if line.startswith("data plane listening on "):
            data_addr = line.split()[-1]
        elif line.startswith("admin plane listening on "):
            admin_addr = line.split()[-1]
    return Gateway(f"http://{data_addr}", f"http://{admin_addr}", server)


def start_gateway_from_env(workdir: str) -> Gateway:
    """The gateway as ``cargo run --release`` starts it: no flags at all, so
    every default holds (embedded backend, ``--store http``,
    ``./fencegate-data``, here under ``workdir``, removed at the end); only
    its two addresses, free ports, come from the environment
    (``FENCEGATE_LISTEN``, ``FENCEGATE_ADMIN_LISTEN``). Other ``FENCEGATE_*``
    variables of this process are left out: each is a flag's default."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FENCEGATE_")}
    env["FENCEGATE_LISTEN"] = f"127.0.0.1:{free_port()}"
    env["FENCEGATE_ADMIN_LISTEN"] = f"127.0.0.1:{free_port()}"
    return start_gateway([], dir=workdir, cwd=workdir, env=env)


@pytest.fixture
def gateway() -> Iterator[Callable[..., Gateway]]:
    """A factory: ``gateway(*extra_args)`` starts one fencegate (embedded
    backend unless ``--upstream`` is in ``extra_args``)."""
    started: list[Server] = []

    def start(*extra: str) -> Gateway:
        data = tempfile.mkdtemp(prefix="fencegate-pyclient-")
        args = ["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--data-dir", data, *extra]
        gw = start_gateway(args, dir=data)
        started.append(gw.server)
        return gw

    yield start
    for server in started:
        server.stop()


# --- lock services --------------------------------------------------------------


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    binary = require("redis-server")
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="pyclient-redis-")
    server = spawn(
        "redis",
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", tmp],
        dir=tmp,
    )
    import redis

    url = f"redis://127.0.0.1:{port}/0"
    try:
        wait_until("redis-server", 30, lambda: bool(redis.Redis.from_url(url, socket_timeout=1).ping()), server.proc)
        yield url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def etcd_url() -> Iterator[str]:
    binary = require("etcd")
    tmp = tempfile.mkdtemp(prefix="pyclient-etcd-")
    client = f"http://127.0.0.1:{free_port()}"
    peer = f"http://127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD_")}
    server = spawn(
        "etcd",
        [
            binary,
            "--name", "default",
            "--data-dir", os.path.join(tmp, "data"),
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"default={peer}",
            "--initial-cluster-state", "new",
        ],
        dir=tmp,
        env=env,
    )  # fmt: skip
    try:
        wait_until(
            "etcd",
            40,
            lambda: requests.post(client + "/v3/kv/range", json={"key": "cGluZw=="}, timeout=1).status_code == 200,
            server.proc,
        )
        yield client
    finally:
        server.stop()


@pytest.fixture(scope="session")
def zookeeper_hosts() -> Iterator[str]:
    java = require("java")
    require(ZK_JAR)
    tmp = tempfile.mkdtemp(prefix="pyclient-zookeeper-")
    port = free_port()
    data = os.path.join(tmp, "data")
    os.mkdir(data)
    config = os.path.join(tmp, "zoo.cfg")
    with open(config, "w") as file:
        file.write(
            f"tickTime=500\ndataDir={data}\nclientPort={port}\nclientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\nminSessionTimeout=1000\nmaxSessionTimeout=10000\nstandaloneEnabled=true\n"
        )
    classpath = f"{tmp}:{ZK_JAR}" + (f":{ZK_LOGGER_JAR}" if os.path.isfile(ZK_LOGGER_JAR) else "")
    server = spawn(
        "zookeeper",
        [
            java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Dzookeeper.admin.enableServer=false", "-Dzookeeper.jmx.log4j.disable=true",
            f"-Dzookeeper.log.dir={tmp}", "-cp", classpath,
            "org.apache.zookeeper.server.quorum.QuorumPeerMain", config,
        ],
        dir=tmp,
        cwd=tmp,
        env={**os.environ, "JMXDISABLE": "true"},
    )  # fmt: skip
    hosts = f"127.0.0.1:{port}"

    def serving() -> bool:
        from kazoo.client import KazooClient

        client = KazooClient(hosts=hosts, timeout=4.0)
        try:
            client.start(timeout=3)
            return True
        finally:
            client.stop()
            client.close()

    try:
        wait_until("ZooKeeper", 60, serving, server.proc)
        yield hosts
    finally:
        server.stop()


def _postgres_binary(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    if not found:
        pytest.fail(f"PostgreSQL's {name} is missing: run scripts/install-deps.sh")
    return found[-1]


@pytest.fixture(scope="session")
def postgres_conninfo() -> Iterator[str]:
    initdb, postgres = _postgres_binary("initdb"), _postgres_binary("postgres")
    root = os.getuid() == 0
    tmp = tempfile.mkdtemp(prefix="pyclient-postgres-", dir="/tmp" if root else None)
    preexec: Callable[[], None] | None = None
    if root:  # PostgreSQL refuses to run as root: run it as nobody
        nobody = pwd.getpwnam("nobody")
        os.chown(tmp, nobody.pw_uid, nobody.pw_gid)

        def preexec() -> None:
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)

    data = os.path.join(tmp, "data")
    init = subprocess.run(
        [initdb, "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"],
        cwd=tmp,
        preexec_fn=preexec,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if init.returncode != 0:
        pytest.fail(f"initdb failed: {init.stderr}")
    port = free_port()
    server = spawn(
        "postgres",
        [
            postgres, "-D", data, "-k", tmp, "-p", str(port),
            "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "dynamic_shared_memory_type=mmap",
        ],
        dir=tmp,
        cwd=tmp,
        preexec_fn=preexec,
    )  # fmt: skip
    conninfo = f"host=127.0.0.1 port={port} user=postgres dbname=postgres connect_timeout=5"

    def serving() -> bool:
        import psycopg

        with psycopg.connect(conninfo) as conn:
            conn.execute("SELECT 1")
        return True

    try:
        wait_until("PostgreSQL", 60, serving, server.proc)
        yield conninfo
    finally:
        server.stop()


# --- stores ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    binary = str(VENV / "bin/moto_server")
    require(binary)
    port = free_port()
    server = spawn("moto", [binary, "-H", "127.0.0.1", "-p", str(port)])
    try:
        wait_until("moto_server", 60, lambda: tcp_open(port), server.proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="session")
def azurite_url() -> Iterator[str]:
    binary = str(REPO / "target/node/node_modules/.bin/azurite-blob")
    require(binary)
    tmp = tempfile.mkdtemp(prefix="pyclient-azurite-")
    port = free_port()
    server = spawn(
        "azurite",
        [binary, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--skipApiVersionCheck", "--silent", "--location", tmp],
        dir=tmp,
    )
    try:
        wait_until("azurite", 60, lambda: tcp_open(port), server.proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


# --- the paused holder ---------------------------------------------------------


class Holder:
    """tests/holder.py in a child process: takes a lock, writes, then can be
    frozen (SIGSTOP) past its lease, thawed, and told to write late."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("holder.py")), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            process_group=0,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        assert self.proc.stdout is not None
        out = self.proc.stdout

        def pump() -> None:
            for line in out:
                self.lines.put(line)

        threading.Thread(target=pump, daemon=True).start()

    def read(self, timeout: float = 60) -> dict[str, Any]:
        import json

        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise TimeoutError(f"the holder said nothing within {timeout} s: {self.stderr()}") from None
        answer: dict[str, Any] = json.loads(line)
        if "fatal" in answer:
            raise RuntimeError(f"the holder failed: {answer['fatal']}")
        return answer

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def freeze(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stderr(self) -> str:
        if self.proc.poll() is None or self.proc.stderr is None:
            return "(still running)"
        return self.proc.stderr.read()

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=10)


@pytest.fixture
def holder() -> Iterator[Callable[..., Holder]]:
    made: list[Holder] = []

    def start(*args: str) -> Holder:
        made.append(Holder(*args))
        return made[-1]

    yield start
    for h in made:
        h.kill()
