"""Which errors count as a lost commit race (retried) and which surface at once."""

from __future__ import annotations

import pytest

from lakemv.core.errors import CommitConflict
from lakemv.spark.commits import Retries, RetryPolicy, is_conflict


class _Java:
    """A stand-in for a py4j Java exception: a class name, a message and a cause."""

    def __init__(self, name: str, message: str, cause: _Java | None = None):
        self._name, self._message, self._cause = name, message, cause

    def getClass(self):  # noqa: N802 - py4j's spelling
        return self

    def getName(self):  # noqa: N802
        return self._name

    def getMessage(self):  # noqa: N802
        return self._message

    def getCause(self):  # noqa: N802
        return self._cause


class _Py4JError(Exception):
    def __init__(self, java: _Java):
        super().__init__("An error occurred while calling o54.sql.")
        self.java_exception = java


@pytest.mark.parametrize(
    "message",
    [
        "Cannot commit, found new delete for replaced data file: GenericDataFile{...}",
        "Cannot remove dangling deletes: current snapshot changed from 1 to 2",
        "Found conflicting files that can contain records matching true",
    ],
)
def test_iceberg_validation_races_are_conflicts(message):
    error = _Py4JError(_Java("org.apache.iceberg.exceptions.ValidationException", message))
    assert is_conflict(error)


def test_a_cause_deep_in_the_chain_counts():
    cause = _Java("org.apache.iceberg.exceptions.CommitFailedException", "Table metadata refresh is required")
    assert is_conflict(_Py4JError(_Java("org.apache.spark.SparkException", "Job aborted", cause)))


def test_other_errors_are_not_retried():
    error = _Py4JError(_Java("org.apache.spark.sql.AnalysisException", "[TABLE_OR_VIEW_NOT_FOUND] lake.x"))
    assert not is_conflict(error)
    calls = []

    def fail() -> None:
        calls.append(1)
        raise error

    with pytest.raises(_Py4JError):
        Retries().run("write", fail, RetryPolicy(attempts=3, base=0, cap=0))
    assert calls == [1]


def test_a_persistent_race_surfaces_as_commit_conflict():
    retries = Retries()

    def lose() -> None:
        raise _Py4JError(_Java("org.apache.iceberg.exceptions.ValidationException", "Found conflicting files"))

    with pytest.raises(CommitConflict, match="still conflicting after 3 attempts"):
        retries.run("MERGE into mirror users", lose, RetryPolicy(attempts=3, base=0, cap=0))
    assert retries.count == 2
