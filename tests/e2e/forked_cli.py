"""`lakemv` commands that fail in their first second, without paying that second for Python's imports.

A catalogue of ~130 such commands spent ~170 s of the suite starting interpreters. Here one server
process imports the CLI once and forks a child per command: each child is a process of its own that
runs the entry point's `main()` with its own argv, environment, working directory and standard
streams (redirected to files, stdin from /dev/null), and leaves as the installed command does
(`lakemv.core.runtime.lifecycle.finish`). What differs from `.venv/bin/lakemv` is only that the
modules were imported before the fork; the other e2e tests start the installed command itself.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

_SERVER = r"""
import importlib, json, os, sys, threading, traceback
import lakemv.flows.cli as cli
for module in sys.argv[1:]:
    importlib.import_module(module)
assert threading.active_count() == 1, "an import started a thread: forking would copy a process mid-work"
protocol = sys.stdout
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                    (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
                opened = os.open(path, flags)
                os.dup2(opened, fd)
                os.close(opened)
            sys.argv = ["lakemv", *request["args"]]
            cli.main()  # leaves through os._exit, after the exit handlers
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    protocol.write(f"{os.waitstatus_to_exitcode(status)}\n")
    protocol.flush()
"""


# What the catalogue's commands import lazily (the lake's status and queries, the planner): imported
# once in the server as well.
PRELOAD = ("lakemv.duck.query", "lakemv.duck.status", "lakemv.core.planner.explain", "lakemv.core.state", "lakemv.core.batch",
           "lakemv.catalog.lake", "lakemv.catalog.sinks", "lakemv.catalog.streams", "lakemv.core.cdc.changeset",
           "lakemv.spark.session", "pyiceberg.catalog.sql")  # fmt: skip


class ForkedCli:
    """One server process; `run` is `subprocess.run([lakemv, *args], ...)`. The server imports without
    any lakemv setting or Prefect API in its environment: each command gets only its own."""

    def __init__(self, scratch: Path) -> None:
        self._scratch = scratch
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEMV_") and k != "PREFECT_API_URL"}
        self._server = subprocess.Popen(
            [sys.executable, "-c", _SERVER, *PRELOAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, env=env,
        )  # fmt: skip

    def run(self, args: Sequence[str], env: Mapping[str, str], cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        out, err = self._scratch / "stdout", self._scratch / "stderr"
        request = {"args": list(args), "env": dict(env), "cwd": str(cwd), "stdout": str(out), "stderr": str(err)}
        assert self._server.stdin is not None and self._server.stdout is not None
        self._server.stdin.write(json.dumps(request) + "\n")
        self._server.stdin.flush()
        ready, _, _ = select.select([self._server.stdout], [], [], timeout)
        assert ready, f"lakemv {' '.join(args)} did not finish within {timeout}s"
        line = self._server.stdout.readline()
        assert line, f"the CLI server died (exit {self._server.poll()})"
        return subprocess.CompletedProcess(["lakemv", *args], int(line), out.read_text(), err.read_text())

    def close(self) -> None:
        if self._server.stdin is not None:
            self._server.stdin.close()
        self._server.wait(timeout=30)
