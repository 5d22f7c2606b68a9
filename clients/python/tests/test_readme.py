"""The README's example, run as written, as a new user would: the kit
installed with pip into a fresh virtual environment, the gateway started with
no flags (as ``cargo run --release`` starts it: embedded backend,
``--store http``, ``./fencegate-data``), a real redis-server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import requests

from .conftest import REPO, start_gateway_from_env

README = REPO / "clients/python/README.md"


def readme_example() -> str:
    """The first ```python block of the README."""
    found = re.search(r"^```python\n(.*?)^```$", README.read_text(), re.MULTILINE | re.DOTALL)
    assert found, f"{README} has no ```python block"
    return found.group(1)


def run(args: list[str], timeout: float, *, env: dict[str, str] | None = None, cwd: str | None = None) -> str:
    """Run to the end (at most ``timeout`` seconds), assert exit 0, return stdout."""
    done = subprocess.run(
        args, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=env, cwd=cwd
    )
    assert done.returncode == 0, f"{args} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_readme_example_runs_as_written(redis_url: str) -> None:
    example = readme_example()
    with tempfile.TemporaryDirectory(prefix="pyclient-readme-") as tmp:
        # A fresh virtual environment, nothing of target/venv in it.
        venv = Path(tmp) / "venv"
        run([sys.executable, "-m", "venv", str(venv)], 120)
        python = str(venv / "bin/python")
        clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        run(
            [python, "-m", "pip", "install", "--disable-pip-version-check", "-q", f"{REPO / 'clients/python'}[redis]"],
            600,
            env=clean,
            cwd=tmp,
        )

        gw = start_gateway_from_env(tempfile.mkdtemp(prefix="pyclient-readme-gateway-"))
        try:
            script = Path(tmp) / "example.py"
            script.write_text(example)
            out = run([python, str(script)], 60, env={**clean, "FENCEGATE_URL": gw.url, "REDIS_URL": redis_url}, cwd=tmp)
            lines = out.splitlines()
            refused = re.fullmatch(r"refused: token (\d+) < highest (\d+)", lines[0]) if lines else None
            assert refused, f"unexpected output:\n{out}"
            old, highest = int(refused.group(1)), int(refused.group(2))
            assert old < highest
            assert lines[1:] == ["day,total", "1,42"]

            # What the second holder wrote is what the gateway holds, under its token.
            stored = requests.get(f"{gw.url}/bucket/report.csv", timeout=10)
            assert (stored.status_code, stored.text) == (200, "day,total\n1,42\n")
            fence = requests.get(f"{gw.admin}/fences/%2Fbucket%2Freport.csv", timeout=10)
            assert fence.json() == {"highest": highest, "resource": "/bucket/report.csv"}
            # The defaults held: the fence state went to ./fencegate-data.
            assert os.path.isdir(os.path.join(gw.server.dir or "", "fencegate-data"))
        finally:
            gw.server.stop()
