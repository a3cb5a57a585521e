"""Long-running local services, each a process of its own that outlives the command that started it:
pid files, logs, readiness waits and stops, in one folder (`lakemv.ops.stack` runs Kafka and Connect so)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lakemv.core.errors import LakemvError
from lakemv.core.runtime import lifecycle


class StackError(LakemvError):
    """A component of the local stack did not start or stop as expected; the message names its log."""


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child (exited, not reaped) is not running
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@dataclass
class ComponentStatus:
    name: str
    running: bool
    pid: int | None = None
    address: str = ""
    detail: str = ""


@dataclass
class ServicesStatus:
    components: list[ComponentStatus] = field(default_factory=list)

    @property
    def running(self) -> bool:
        return bool(self.components) and all(c.running for c in self.components)

    def table(self):  # noqa: ANN201 - a rich Table, imported here: services start without rich
        from rich.table import Table
        from rich.text import Text

        table = Table("component", "state", "pid", "address", "detail")
        for c in self.components:
            state = Text("running", style="green") if c.running else Text("stopped", style="red")
            table.add_row(c.name, state, str(c.pid or ""), c.address, c.detail)
        return table


class Services:
    """Processes kept in `folder`: `<name>.pid`, `logs/<name>.log`."""

    def __init__(self, folder: Path):
        self.folder = folder

    def _pid_file(self, name: str) -> Path:
        return self.folder / f"{name}.pid"

    def _pid(self, name: str) -> int | None:
        """The service's pid, if the process with that pid is still the one started from this folder
        (after a reboot a stale pid file may name another process, which must not be signalled).
        A process in the middle of exec shows an empty command line for an instant: that is not
        another process."""
        try:
            pid = int(self._pid_file(name).read_text())
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            return None
        return pid if not command.strip() or str(self.folder) in command else None

    def log(self, name: str) -> Path:
        return self.folder / "logs" / f"{name}.log"

    def _tail(self, name: str, lines: int = 15) -> str:
        try:
            text = self.log(name).read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return ""
        return "\n".join(text)

    def _spawn(self, name: str, command: Sequence[str], env: Mapping[str, str] | None = None) -> int:
        """Start a service that outlives this process: in a session of its own, not our child
        (a shell starts it in the background and exits), its output appended to its log."""
        lifecycle.outlive_me()
        self.log(name).parent.mkdir(parents=True, exist_ok=True)
        script = 'setsid "$@" >>"$LAKEMV_LOG" 2>&1 </dev/null & echo $!'
        done = subprocess.run(
            ["sh", "-c", script, "sh", *command], capture_output=True, text=True, check=True, cwd=self.folder,
            env={**os.environ, **(env or {}), "LAKEMV_LOG": str(self.log(name))},
        )  # fmt: skip
        pid = int(done.stdout.strip())
        self._pid_file(name).write_text(str(pid))
        return pid

    def _wait(self, name: str, ready: Callable[[], bool], seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if ready():
                return
            if not alive(self._pid(name)):
                raise StackError(f"{name} exited while starting; the end of {self.log(name)}:\n{self._tail(name)}")
            time.sleep(0.2)
        raise StackError(f"{name} did not become ready within {seconds:.0f} s; see {self.log(name)}:\n{self._tail(name)}")

    def _stop(self, name: str, seconds: float = 20.0) -> None:
        pid = self._pid(name)
        if alive(pid):
            assert pid is not None
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + seconds
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if alive(pid):
                os.killpg(pid, signal.SIGKILL)
        self._pid_file(name).unlink(missing_ok=True)

    def kill(self, name: str) -> None:
        """Kill one component at once (SIGKILL), as a crash would: for fault tests."""
        pid = self._pid(name)
        if alive(pid):
            assert pid is not None
            os.killpg(pid, signal.SIGKILL)
            while alive(pid):
                time.sleep(0.05)
        self._pid_file(name).unlink(missing_ok=True)
