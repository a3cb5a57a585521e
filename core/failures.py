"""Every failure classified once: transient (retrying may succeed), environmental (the machine's fault:
one `error:` line with the fix) or terminal (a bug or a user mistake: reported as it is).

A JVM error reaches Python as a py4j error (`java_exception`) or as PySpark's captured exception
(`getCondition()`, its Java origin); both are read by what they are - Spark's error condition, the
Java exception classes of the cause chain and where they were thrown - not by their messages:

* a lost optimistic-concurrency race: Iceberg's `CommitFailedException`, a `ValidationException`
  thrown while a snapshot was being committed (another commit won: conflicting files, files gone), a
  SQLite catalog that is busy or locked (JDBC's `SQLiteException` result code, Python's sqlite3
  error name, also under SQLAlchemy) and lakemv's own `CommitConflict`;
* Spark 4.1.1's Kafka source failing a restarted query (SPARK-55271: a NullPointerException thrown in
  the Kafka source's code right after it re-ran the batch a crash interrupted): restarting goes on.

Operating-system failures from the JVM carry no errno, so for those alone the cause chain's text is
read (disk full, permission denied, read-only, an unreachable object store).
"""

from __future__ import annotations

import errno
import re
from dataclasses import dataclass
from typing import Any, Literal

from lakemv.core.errors import CommitConflict

Kind = Literal["transient", "environment", "terminal"]
_RACES = ("org.apache.iceberg.exceptions.CommitFailedException",)
_VALIDATION = "org.apache.iceberg.exceptions.ValidationException"
_COMMITTING = ("org.apache.iceberg.SnapshotProducer", "org.apache.iceberg.BaseTransaction")  # frames of a commit
_SQLITE_BUSY = ("SQLITE_BUSY", "SQLITE_LOCKED")  # and their extended codes (SQLITE_BUSY_SNAPSHOT, ...)
_KAFKA_SOURCE = "org.apache.spark.sql.kafka010."


@dataclass(frozen=True)
class Failure:
    """What a failure is: its kind, what decided it, and its most telling line."""

    kind: Kind
    reason: str  # e.g. "CommitFailedException", "SQLITE_BUSY", "disk full", the Spark condition
    line: str


@dataclass(frozen=True)
class _Java:
    """One Java throwable of a cause chain: its class, message and stack frames (class names, methods)."""

    name: str
    message: str
    frames: tuple[tuple[str, str], ...]
    code: str | None = None  # the result code of the SQLite JDBC driver's exception (SQLITE_BUSY, ...)


def _python_chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__ or getattr(current, "_cause", None) or getattr(current, "orig", None)
    return seen


def _java_chain(exc: BaseException) -> list[_Java]:
    """The Java throwables behind `exc` (py4j's `java_exception`, PySpark's `_origin`) and their causes."""
    found: list[_Java] = []
    for error in _python_chain(exc):
        java: Any = getattr(error, "java_exception", None) or getattr(error, "_origin", None)
        depth = 0
        while java is not None and depth < 12:
            try:
                name, message = str(java.getClass().getName()), str(java.getMessage())
            except Exception:  # noqa: BLE001 - the gateway may be gone: what was read is what there is
                break
            try:
                frames = tuple((str(f.getClassName()), str(f.getMethodName())) for f in java.getStackTrace())
            except Exception:  # noqa: BLE001 - no frames to read: the class decides alone
                frames = ()
            code = None
            if name == "org.sqlite.SQLiteException":
                try:
                    code = str(java.getResultCode().name())
                except Exception:  # noqa: BLE001 - no code to read: not counted as busy
                    code = None
            found.append(_Java(name, message, frames, code))
            try:
                java = java.getCause()
            except Exception:  # noqa: BLE001
                break
            depth += 1
    return found


def _sqlite_busy(errors: list[BaseException], java: list[_Java]) -> bool:
    """A SQLite catalog database that is busy or locked: Python's sqlite3 error name (3.11+, also under
    SQLAlchemy's `orig`), or the result code of the JDBC driver's `SQLiteException` in the Java chain."""
    names = [str(getattr(e, "sqlite_errorname", "")) for e in errors] + [j.code or "" for j in java]
    return any(name.startswith(_SQLITE_BUSY) for name in names)


def _environment(errors: list[BaseException], java: list[_Java]) -> tuple[str, str] | None:
    """(reason, the line with its fix) for an operating-system failure, or None."""
    text = " ".join([str(e) for e in errors] + [j.message for j in java])
    numbers = {getattr(e, "errno", None) for e in errors}
    names = {j.name for j in java}
    where = next((f" ({e.filename})" for e in errors if getattr(e, "filename", None)), "")
    if errno.ENOSPC in numbers or errno.EDQUOT in numbers or "No space left on device" in text or "Disk quota exceeded" in text:
        return "disk full", (
            f"disk full: no space left on the device{where}; free space or point LAKEMV_WAREHOUSE / LAKEMV_LOCAL_DIR at a "
            "larger disk, then run again: the next run redoes the batch that was cut short, exactly once"
        )
    if errno.EACCES in numbers or errno.EPERM in numbers or "java.nio.file.AccessDeniedException" in names or "Permission denied" in text:
        return "permission denied", f"permission denied{where}: the user running lakemv cannot write there; fix the folder's owner or mode"
    if errno.EROFS in numbers or "java.nio.file.ReadOnlyFileSystemException" in names or "Read-only file system" in text:
        return "read-only", f"read-only file system{where}: point LAKEMV_WAREHOUSE / LAKEMV_LOCAL_DIR at a writable folder"
    if "AWS Error NETWORK_CONNECTION" in text or ("Could not connect to server" in text and "s3" in text.lower()):
        return "object store unreachable", "cannot reach the object store (LAKEMV_S3_ENDPOINT): is it running, and is the endpoint right?"
    return None


def classify(exc: BaseException) -> Failure:
    """Transient, environment or terminal (see the module docstring)."""
    errors = _python_chain(exc)
    java = _java_chain(exc)
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    if any(isinstance(e, CommitConflict) for e in errors):
        return Failure("transient", "CommitConflict", first)
    for j in java:
        if j.name in _RACES:
            return Failure("transient", j.name.rsplit(".", 1)[1], _line(j))
        if j.name == _VALIDATION and (not j.frames or any(c.startswith(_COMMITTING) for c, _ in j.frames)):
            return Failure("transient", "ValidationException while committing", _line(j))
    if _sqlite_busy(errors, java):
        return Failure("transient", "SQLITE_BUSY", first)
    if any(j.name == "java.lang.NullPointerException" and any(c.startswith(_KAFKA_SOURCE) for c, _ in j.frames) for j in java):
        return Failure("transient", "SPARK-55271", first)
    environment = _environment(errors, java)
    if environment is not None:
        return Failure("environment", *environment)
    condition = next((c for e in errors if callable(getattr(e, "getCondition", None)) and (c := _condition(e))), None)
    return Failure("terminal", condition or (java[0].name if java else type(exc).__name__), first)


def _condition(error: BaseException) -> str | None:
    try:
        return error.getCondition()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a captured error whose gateway is gone
        return None


def _line(j: _Java) -> str:
    return f"{j.name.rsplit('.', 1)[1]}: {(j.message.strip().splitlines() or [''])[0]}"[:300]


def is_transient(exc: BaseException) -> bool:
    """True when retrying may succeed (a lost commit race, a busy catalog, the Kafka source's restart bug)."""
    return classify(exc).kind == "transient"


def python_origin(exc: BaseException) -> str | None:
    """The Python exception a JVM failure carries, as its traceback's last line (`ValueError: ...`): the
    error of lakemv's own code that Spark called back (a foreachBatch function), else None. Spark wraps
    it in a StreamingQueryException whose first line names only the condition."""
    texts = [str(e) for e in _python_chain(exc)] + [j.message for j in _java_chain(exc)]
    for text in texts:
        if _TRACEBACK in text:
            found = [line for line in text.split(_TRACEBACK, 1)[1].splitlines() if _RAISED.match(line)]
            if found:
                return found[-1].strip()[:300]
    return None


_TRACEBACK = "Traceback (most recent call last):"
# A traceback's own last line: the exception's class (unindented), then its message
_RAISED = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Conflict|Interrupted|Exit|Warning)(: .*)?$")


def explain(exc: BaseException) -> str | None:
    """The cause and the fix of an environmental failure, or None when `exc` is not one."""
    found = _environment(_python_chain(exc), _java_chain(exc))
    return found[1] if found is not None else None
