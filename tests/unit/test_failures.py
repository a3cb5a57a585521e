"""Which failures are transient (retried), environmental (one line with the fix) or terminal, read from
their classes, conditions and frames (lakemv.core.failures), and the one retry policy (lakemv.core.retry)."""

from __future__ import annotations

import errno
import sqlite3

import pytest

from lakemv.core.errors import CommitConflict
from lakemv.core.failures import classify, explain, is_transient
from lakemv.core.retry import Retries, RetryPolicy


class _Frame:
    def __init__(self, cls: str, method: str):
        self._cls, self._method = cls, method

    def getClassName(self):  # noqa: N802 - py4j's spelling
        return self._cls

    def getMethodName(self):  # noqa: N802
        return self._method


class _Java:
    """A stand-in for a py4j Java exception: a class name, a message, frames and a cause."""

    def __init__(self, name: str, message: str, cause: _Java | None = None, frames: tuple[tuple[str, str], ...] = ()):
        self._name, self._message, self._cause, self._frames = name, message, cause, frames

    def getClass(self):  # noqa: N802
        return self

    def getName(self):  # noqa: N802
        return self._name

    def getMessage(self):  # noqa: N802
        return self._message

    def getCause(self):  # noqa: N802
        return self._cause

    def getStackTrace(self):  # noqa: N802
        return [_Frame(c, m) for c, m in self._frames]


class _Py4JError(Exception):
    def __init__(self, java: _Java):
        super().__init__("An error occurred while calling o54.sql.")
        self.java_exception = java


class _Captured(Exception):
    """PySpark's captured exception: a condition, and its Java origin."""

    def __init__(self, condition: str, origin: _Java | None = None):
        super().__init__(f"[{condition}] something")
        self._condition, self._origin = condition, origin

    def getCondition(self):  # noqa: N802
        return self._condition


COMMITTING = (("org.apache.iceberg.MergingSnapshotProducer", "validateAddedDataFiles"), ("org.apache.iceberg.SnapshotProducer", "apply"))


@pytest.mark.parametrize(
    "message",
    ["Cannot commit, found new delete for replaced data file: GenericDataFile{...}", "Cannot remove dangling deletes", "Found conflicting files"],
)
def test_a_validation_failure_while_committing_is_a_lost_race(message):
    error = _Py4JError(_Java("org.apache.iceberg.exceptions.ValidationException", message, frames=COMMITTING))
    assert classify(error).kind == "transient" and classify(error).line.startswith("ValidationException: ")


def test_a_validation_failure_outside_a_commit_is_not_retried():
    frames = (("org.apache.iceberg.types.TypeUtil", "validateSchema"),)
    assert classify(_Py4JError(_Java("org.apache.iceberg.exceptions.ValidationException", "Cannot add column", frames=frames))).kind == "terminal"


def test_a_cause_deep_in_the_chain_counts_whatever_its_message():
    cause = _Java("org.apache.iceberg.exceptions.CommitFailedException", "anything at all")
    failure = classify(_Py4JError(_Java("org.apache.spark.SparkException", "Job aborted", cause)))
    assert (failure.kind, failure.reason) == ("transient", "CommitFailedException")


def test_a_busy_sqlite_catalog_is_transient_from_python_and_from_jdbc():
    busy = sqlite3.OperationalError("database is locked")
    busy.sqlite_errorname = "SQLITE_BUSY"
    assert is_transient(busy)

    class _Code:
        def name(self):
            return "SQLITE_BUSY_SNAPSHOT"

    jdbc = _Java("org.sqlite.SQLiteException", "[SQLITE_BUSY_SNAPSHOT]")
    jdbc.getResultCode = _Code  # type: ignore[attr-defined]
    assert is_transient(_Py4JError(_Java("org.apache.iceberg.jdbc.UncheckedSQLException", "Failed to commit", jdbc)))
    assert not is_transient(sqlite3.OperationalError("no such table: x"))


def test_the_kafka_sources_restart_bug_is_transient_by_where_it_is_thrown():
    frames = (("scala.collection.IterableOps", "map"), ("org.apache.spark.sql.kafka010.KafkaMicroBatchStream", "metrics"))
    npe = _Java("java.lang.NullPointerException", 'Cannot invoke "scala.Option.get()"', frames=frames)
    assert classify(_Captured("STREAM_FAILED", _Java("org.apache.spark.sql.streaming.StreamingQueryException", "failed", npe))).reason == "SPARK-55271"
    elsewhere = _Java("java.lang.NullPointerException", "x", frames=(("org.apache.spark.sql.execution.X", "y"),))
    assert not is_transient(_Captured("STREAM_FAILED", elsewhere))


def test_a_spark_condition_is_terminal_and_named():
    failure = classify(_Captured("TABLE_OR_VIEW_NOT_FOUND"))
    assert (failure.kind, failure.reason) == ("terminal", "TABLE_OR_VIEW_NOT_FOUND")


def test_the_machines_faults_are_environment_with_the_fix():
    full = OSError(errno.ENOSPC, "No space left on device", "/wh/x")
    assert classify(full).kind == "environment" and explain(full).startswith("disk full")
    denied = _Py4JError(_Java("java.nio.file.AccessDeniedException", "/wh/x"))
    assert explain(denied).startswith("permission denied")
    assert explain(ValueError("no")) is None


def test_other_errors_are_not_retried():
    error = _Captured("TABLE_OR_VIEW_NOT_FOUND")
    calls = []

    def fail() -> None:
        calls.append(1)
        raise error

    with pytest.raises(_Captured):
        Retries().run("write", fail, RetryPolicy(attempts=3, base=0, cap=0))
    assert calls == [1]


def test_a_persistent_race_surfaces_as_commit_conflict():
    retries = Retries()

    def lose() -> None:
        raise _Py4JError(_Java("org.apache.iceberg.exceptions.CommitFailedException", "Cannot commit: stale metadata"))

    with pytest.raises(CommitConflict, match="still conflicting after 3 attempts: CommitFailedException: Cannot commit"):
        retries.run("MERGE into mirror users", lose, RetryPolicy(attempts=3, base=0, cap=0))
    assert retries.count == 2


def test_a_python_error_in_a_spark_callback_is_named_by_its_own_last_line():
    from lakemv.core.failures import python_origin

    message = (
        "[STREAM_FAILED] Query [id = 48, runId = 52] terminated with exception: [FOREACH_BATCH_USER_FUNCTION_ERROR] An error "
        "occurred in the user provided function in foreach batch sink. Reason: An exception was raised by the Python Proxy. "
        "Return Message: Traceback (most recent call last):\n"
        '  File "/x/py4j/clientserver.py", line 644, in _call_proxy\n'
        "    return_value = getattr(self.pool[obj_id], method)(*params)\n"
        '  File "/x/lakemv/spark/stream/loop.py", line 121, in each_batch\n'
        '    raise KeyError("users: {1: 2}")\n'
        "KeyError: 'users: {1: 2}'\n"
        "\n\tat py4j.Protocol.getReturnValue(Protocol.java:476)\n"
        "\tat org.apache.spark.sql.execution.streaming.sources.PythonForeachBatchHelper$.call(Unknown Source)\n"
    )
    assert python_origin(RuntimeError(message)) == "KeyError: 'users: {1: 2}'"
    assert python_origin(RuntimeError("[STREAM_FAILED] no traceback here")) is None
