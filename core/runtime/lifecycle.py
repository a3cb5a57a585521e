"""The process's lifecycle: how lakemv stops on SIGINT / SIGTERM, and what it takes down with it.

A terminal's Ctrl-C and a supervisor's stop (systemd, Kubernetes, `docker stop`, a Prefect
cancellation) signal the whole process group. lakemv's helper processes, the Spark JVM and a
temporary Prefect API, run in sessions of their own, so the signal reaches the Python driver alone,
which then stops in order:

1. the first signal sets `STOP`, raises `Interrupted` in the main thread (a KeyboardInterrupt, so
   Prefect records the run as crashed and every `finally` runs) and calls the `on_stop` callbacks in
   a helper thread (they cancel running Spark jobs: a batch cut short is replayed on the next run);
2. the children are stopped: the JVM by closing its stdin (Spark's gateway exits on EOF), the API by
   SIGTERM, each killed if it has not exited within a few seconds;
3. a second signal, or `grace` seconds without an exit, kills every child and exits at once.

Everything a batch writes is idempotent under SIGKILL at any step (the crash harness proves it), so
cutting work short never costs correctness, only the work redone.
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

STOP = threading.Event()
SIGNALS = (signal.SIGINT, signal.SIGTERM)

_children: dict[str, subprocess.Popen] = {}
_on_stop: list[Callable[[], None]] = []
_lock = threading.Lock()
_grace = 8.0
_installed = False
_subreaper = False
_last_signal = signal.SIGINT


class Interrupted(KeyboardInterrupt):
    """A stop was requested (SIGINT or SIGTERM); work in progress is abandoned, to be replayed."""

    def __init__(self, signal_name: str = "signal"):
        self.signal_name = signal_name
        super().__init__(f"stopped by {signal_name}")


class Stopped(RuntimeError):
    """A stop was requested: raised by `check` outside the main thread (e.g. in a Spark callback)."""


def stopping() -> bool:
    """Whether a stop was requested."""
    return STOP.is_set()


def check() -> None:
    """Raise if a stop was requested (at loops and step boundaries): `Interrupted` in the main
    thread, `Stopped` elsewhere (a callback thread must return an error, not die)."""
    if STOP.is_set():
        if threading.current_thread() is threading.main_thread():
            raise Interrupted()
        raise Stopped("stop requested: the unit in progress is abandoned and replayed on the next run")


def adopt(name: str, process: subprocess.Popen) -> None:
    """Stop `process` with this one (on exit, on a signal's deadline)."""
    with _lock:
        _children[name] = process


def release(name: str) -> subprocess.Popen | None:
    """Forget a child (it was stopped by its owner)."""
    with _lock:
        return _children.pop(name, None)


def on_stop(callback: Callable[[], None]) -> Callable[[], None]:
    """Call `callback` (in a helper thread) when a stop is requested; returns a function that unregisters it."""
    with _lock:
        if callback not in _on_stop:
            _on_stop.append(callback)

    def remove() -> None:
        with _lock:
            if callback in _on_stop:
                _on_stop.remove(callback)

    return remove


PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> None:
    """Linux prctl(2); a no-op where it is not available."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value)
    except (OSError, AttributeError):
        pass


def outlive_me() -> None:
    """Let processes started from now on outlive this one (a service such as the local stack):
    orphans are no longer adopted, so `reap_descendants` at exit does not find them."""
    _prctl(PR_SET_CHILD_SUBREAPER, 0)


def die_with_parent() -> None:
    """For a child, before exec (Popen's preexec_fn): SIGKILL when its parent dies, even by SIGKILL."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def descendants() -> list[int]:
    """Pids of every live process below this one (children of children, ... from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [os.getpid()]
    while todo:
        for pid in parents.get(todo.pop(), []):
            found.append(pid)
            todo.append(pid)
    return found


def _signal_all(pids: list[int], number: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, number)
        except (ProcessLookupError, PermissionError):
            pass


def reap_descendants(timeout: float = 3.0) -> None:
    """Stop every process still below this one (e.g. a flow-run process `serve` started and its JVM):
    SIGTERM, then SIGKILL what is left after `timeout`."""
    pids = descendants()
    if not pids:
        return
    _signal_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while (pids := descendants()) and time.monotonic() < deadline:
        time.sleep(0.1)
    _signal_all(pids, signal.SIGKILL)


def _kill(process: subprocess.Popen) -> None:
    """SIGKILL a child and its process group (children run in sessions of their own)."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            process.kill()
        except ProcessLookupError:
            pass


def _ask_to_stop(process: subprocess.Popen) -> None:
    """The polite stop: EOF on its stdin (Spark's gateway exits on it), else SIGTERM. After a stop
    signal a child driven by its stdin (the JVM) is killed instead: its orderly exit runs the JVM's
    shutdown hooks while a batch cut short may still be committing in its threads, and a commit that
    failed there after its catalog row had moved made Iceberg delete the files of the snapshot it had
    just committed (seen in CI: a view's current snapshot without its manifest list). A kill leaves what
    a crash does, which the next run replays (the crash harness proves every step of it)."""
    if process.poll() is not None:
        return
    if process.stdin is not None and STOP.is_set():
        _kill(process)
        return
    try:
        if process.stdin is not None:
            process.stdin.close()
        else:
            process.terminate()
    except OSError:
        pass


def _wait_or_kill(process: subprocess.Popen, timeout: float) -> None:
    try:
        process.wait(timeout=max(0.1, timeout))
    except subprocess.TimeoutExpired:
        _kill(process)
        process.wait(timeout=5)


def kill_children() -> None:
    """SIGKILL every child at once (a second signal, or the grace period ran out)."""
    with _lock:
        children = list(_children.values())
    for process in children:
        _kill(process)


def stop_child(name: str, timeout: float = 10.0) -> None:
    """Stop one child (asked, then killed after `timeout`) and forget it."""
    process = release(name)
    if process is not None:
        _ask_to_stop(process)
        _wait_or_kill(process, timeout)


def ask_to_stop(name: str) -> None:
    """Ask one child to stop now, without waiting (the exit waits for it, with the others)."""
    with _lock:
        process = _children.get(name)
    if process is not None:
        _ask_to_stop(process)


def stop_children(timeout: float = 5.0) -> None:
    """Stop every child, newest first: ask each (stdin EOF or SIGTERM), wait, then kill."""
    with _lock:
        children = list(_children.values())[::-1]
        _children.clear()
    for process in children:
        _ask_to_stop(process)
    deadline = time.monotonic() + timeout
    for process in children:
        _wait_or_kill(process, deadline - time.monotonic())


def _run_callbacks() -> None:
    with _lock:
        callbacks = list(_on_stop)
    for callback in callbacks:
        try:
            callback()
        except Exception:  # noqa: BLE001 - a stop callback must not keep others from running
            pass


def _deadline(grace: float) -> None:
    time.sleep(grace)
    _say(f"did not stop within {grace:.0f}s: killing what is left")
    hard_exit()


def hard_exit(code: int | None = None) -> None:
    """Kill every child and leave now, without interpreter teardown (threads may be stuck in calls)."""
    code = 128 + int(_last_signal) if code is None else code
    kill_children()
    _signal_all(descendants(), signal.SIGKILL)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _say(message: str) -> None:
    try:
        sys.stderr.write(f"{message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _handle(number: int, frame) -> None:  # noqa: ANN001, ARG001 - signal handler signature
    global _last_signal
    name = signal.Signals(number).name
    if STOP.is_set():  # the second signal: at once
        _say(f"{name} again: exiting now")
        hard_exit()
    _last_signal = signal.Signals(number)
    STOP.set()
    # Libraries log what the stop aborts (py4j: "KeyboardInterrupt while sending command", with its
    # trace): noise now. The run's final state is still recorded through the API, not through logs.
    logging.disable(logging.CRITICAL)
    _say(f"stopping ({name}); the work in progress is replayed on the next run. {name} again exits at once")
    threading.Thread(target=_run_callbacks, name="lakemv-stop", daemon=True).start()
    threading.Thread(target=_deadline, args=(_grace,), name="lakemv-stop-deadline", daemon=True).start()
    raise Interrupted(name)


def _unraisable(unraisable) -> None:  # noqa: ANN001 - sys.UnraisableHookArgs
    """The stop's KeyboardInterrupt, raised where Python cannot propagate it (inside a C callback such
    as pydantic building a validator, or a finalizer), is reported as "Exception ignored in ..." with
    a traceback: after a stop signal that is the stop working, not an error to show the user."""
    if STOP.is_set() and isinstance(unraisable.exc_value, KeyboardInterrupt):
        return
    _default_unraisable(unraisable)


_default_unraisable = sys.unraisablehook


def install(grace: float = 8.0, subreaper: bool = False) -> bool:
    """Handle SIGINT and SIGTERM as described above (main thread only; idempotent, re-asserts after
    a library replaced the handlers, e.g. PySpark's SIGINT handler when a SparkContext starts).

    With `subreaper`, processes orphaned below this one (a grandchild whose parent died) are
    re-parented to it, so that `finish` finds and stops them too."""
    global _grace, _installed, _subreaper
    if threading.current_thread() is not threading.main_thread():
        return False
    _grace = grace
    if subreaper:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        _subreaper = True
    for number in SIGNALS:
        signal.signal(number, _handle)
    sys.unraisablehook = _unraisable
    if not _installed:
        atexit.register(_at_exit)  # registered first, so it runs last: after libraries' own exit work
        _installed = True
    return True


def _at_exit() -> None:
    stop_children()
    if _subreaper:
        reap_descendants()


def reassert() -> None:
    """Put the handlers back if `install` was called (a library may have replaced them since)."""
    if _installed:
        install(_grace)


def last_signal() -> int:
    """The number of the signal that asked to stop (SIGINT when a KeyboardInterrupt came otherwise)."""
    return int(_last_signal)


def signal_name() -> str:
    return _last_signal.name


def finish(code: int) -> None:
    """Leave the process. Normally through the interpreter's exit, whose handlers stop Spark in order
    and then the children (last, so Prefect still flushes its logs to its API); after a stop request
    at once, without waiting for threads that may be blocked in calls to the JVM that is gone."""
    if STOP.is_set() or code >= 128:
        code = 128 + int(_last_signal) if STOP.is_set() else code
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - threads of a stopping JVM client print tracebacks
        stop_children()
        reap_descendants()
        hard_exit(code)
    # A normal exit runs the exit handlers now, in their order (Spark's orderly stop, Prefect's, then
    # the children), and then leaves without the interpreter's teardown: after a flow run, finalizing
    # every module and object took 0.8 s of a 10 s `ingest --once`, and nothing is left to write.
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    threading._shutdown()  # type: ignore[attr-defined]  # as the interpreter's exit: wait for non-daemon threads
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)
