"""A Prefect API for `lakemv serve`: the one in PREFECT_API_URL, or a local server started for it.

Schedules need Prefect's scheduler service, which only a real server runs (the temporary server a
plain flow call starts has none). Without PREFECT_API_URL, `lakemv serve` starts
`prefect server start` on loopback with its database under `<warehouse>/_prefect`, and stops it on exit.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from catalog.errors import ConfigError


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _healthy(api: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api}/health", timeout=2) as response:  # noqa: S310 - loopback URL we built
            return response.status == 200
    except OSError:
        return False


@contextmanager
def prefect_api(home: Path, port: int | None = None, timeout: float = 90.0) -> Iterator[str]:
    """Yield the Prefect API URL to use, starting a local server when none is configured."""
    configured = os.environ.get("PREFECT_API_URL")
    if configured:
        yield configured
        return
    home.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL": "WARNING",
    }
    log = (home / "server.log").open("ab")
    server = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + timeout
        while not _healthy(api):
            if server.poll() is not None or time.monotonic() > deadline:
                raise ConfigError(f"the Prefect server did not start (see {home / 'server.log'})", "prefect server")
            time.sleep(0.5)
        os.environ["PREFECT_API_URL"] = api
        yield api
    finally:
        os.environ.pop("PREFECT_API_URL", None)
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
