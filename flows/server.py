"""The Prefect API lakemv records flow runs in: the one in PREFECT_API_URL, or one it starts.

* Flow commands (`ingest`, `backfill`, `verify`, `compact`) without PREFECT_API_URL start a
  temporary API, as Prefect's ephemeral mode does (same app, no UI, no services), but launched at
  the very start of the command so that it boots while the JVM does, and in a session of its own:
  a Ctrl-C to the terminal's process group leaves it up until the run's final state is recorded.
* `lakemv serve` needs schedules, which only a full server runs: `prefect server start` on
  loopback, its database under `<warehouse>/_prefect` (a new one copied from a migrated empty one,
  `lakemv.flows.prefectdb`).

Both die with lakemv whatever kills it (Linux parent-death signal), and are stopped on exit.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from lakemv.core.errors import ConfigError
from lakemv.core.runtime import lifecycle
from lakemv.core.runtime.ports import free_port


UI_API_URL = ("PREFECT_UI_API_URL", "PREFECT_SERVER_UI_API_URL")  # where the UI served by a server finds its API


def healthy(api: str, timeout: float = 2.0) -> bool:
    """Whether the Prefect API at `api` answers its health check."""
    try:
        with urllib.request.urlopen(f"{api.rstrip('/')}/health", timeout=timeout) as response:  # noqa: S310 - an API URL
            return response.status == 200
    except (OSError, ValueError):
        return False


class PrefectApi:
    """A Prefect API URL, and the local process serving it when lakemv started one."""

    def __init__(self, url: str, process: subprocess.Popen | None = None, log: Path | None = None, name: str | None = None):
        self.url = url
        self.process = process
        self.log = log
        self.name = name  # the child's name in lakemv.core.runtime.lifecycle
        self._ready = process is None

    @property
    def launched(self) -> bool:
        """Whether lakemv started this API (its database is lakemv's alone), rather than found it configured."""
        return self.process is not None

    @classmethod
    def configured(cls) -> PrefectApi | None:
        url = os.environ.get("PREFECT_API_URL")
        return cls(url) if url else None

    @classmethod
    def launch(cls, args: list[str], port: int, env: dict[str, str], log: Path, name: str) -> PrefectApi:
        """Start a server process on `port` (returns at once; `ready` waits for it)."""
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            process = subprocess.Popen(  # noqa: S603 - our interpreter, our arguments
                [sys.executable, "-m", *args],
                env={**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", **env},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=lifecycle.die_with_parent,  # noqa: PLW1509 - must run in the child before exec
            )
        lifecycle.adopt(name, process)
        return cls(f"http://127.0.0.1:{port}/api", process, log, name)

    @classmethod
    def temporary(cls, home: Path | None = None) -> PrefectApi:
        """Prefect's ephemeral API app in a process of its own (database: PREFECT_HOME's, as Prefect's)."""
        port = free_port()
        prefect_dir = Path(importlib.util.find_spec("prefect").origin).parents[1]  # type: ignore[union-attr, arg-type]
        args = [
            "uvicorn", "--app-dir", str(prefect_dir), "--factory", "prefect.server.api.server:create_app",
            "--host", "127.0.0.1", "--port", str(port), "--log-level", "error", "--lifespan", "on",
        ]  # fmt: skip
        env = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
        home = home or Path(os.environ.get("PREFECT_HOME", Path.home() / ".prefect"))
        return cls.launch(args, port, env, home / "lakemv-temporary-api.log", "prefect-api")

    @classmethod
    def server(cls, home: Path, port: int | None = None) -> PrefectApi:
        """`prefect server start` (with its scheduler) on loopback, its database under `home`."""
        from lakemv.flows.prefectdb import seed

        seed(home)  # a new database starts as a migrated copy (lakemv.flows.prefectdb): ~20 s sooner
        port = port or free_port()
        args = ["prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)]
        env = {"PREFECT_HOME": str(home), "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL": "WARNING"}
        # The UI asks its server for the API's address (`/ui-settings`): unless configured (a proxy in
        # front), that is Prefect's default port 4200, not the one chosen here, and the UI cannot reach it.
        if not any(os.environ.get(name) for name in UI_API_URL):
            env["PREFECT_UI_API_URL"] = f"http://127.0.0.1:{port}/api"
        return cls.launch(args, port, env, home / "server.log", "prefect-server")

    def ready(self, timeout: float = 90.0) -> str:
        """Wait until the API answers; export it as PREFECT_API_URL for this process and its children."""
        if not self._ready:
            deadline = time.monotonic() + timeout
            while not healthy(self.url, timeout=1.0):
                lifecycle.check()
                if self.process is not None and self.process.poll() is not None:
                    raise ConfigError(f"the Prefect API did not start (exit {self.process.returncode}; see {self.log})", "prefect")
                if time.monotonic() > deadline:
                    raise ConfigError(f"the Prefect API did not start within {timeout:.0f}s (see {self.log})", "prefect")
                time.sleep(0.1)
            self._ready = True
        elif self.process is None and not healthy(self.url, timeout=5.0):
            raise ConfigError(f"cannot reach the Prefect API at {self.url}: start it, or unset PREFECT_API_URL", "PREFECT_API_URL")
        export_api_url(self.url)
        return self.url

    def stop(self) -> None:
        """Stop the process lakemv started (nothing for a configured API)."""
        if self.name is None:
            return
        lifecycle.stop_child(self.name)
        export_api_url(None)


def export_api_url(url: str | None) -> None:
    """PREFECT_API_URL for this process, its children and every thread of it.

    A thread other than the one that entered a `temporary_settings` (the Spark callback thread that
    runs each batch and logs its line) reads Prefect's global settings, made from the environment
    when Prefect was imported: without a refresh it finds no API URL and starts an in-process
    ephemeral server just to ship that thread's logs (~4 s and a second writer of the database).
    """
    if url is None:
        os.environ.pop("PREFECT_API_URL", None)
    else:
        os.environ["PREFECT_API_URL"] = url
    if "prefect.context" in sys.modules:
        from prefect.context import refresh_global_settings_context

        refresh_global_settings_context()


@contextmanager
def prefect_api(
    home: Path, port: int | None = None, timeout: float = 90.0, meanwhile: Callable[[], None] | None = None
) -> Iterator[PrefectApi]:
    """`lakemv serve`'s API, ready: the configured one, or a full local server started for it;
    `meanwhile` runs while that server boots (an error there stops it again)."""
    api = PrefectApi.configured() or PrefectApi.server(home, port)
    try:
        if meanwhile is not None:
            meanwhile()
        api.ready(timeout)
        yield api
    finally:
        api.stop()
