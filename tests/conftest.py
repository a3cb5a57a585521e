"""Shared fixtures: one SparkSession per test session, a fresh catalog + warehouse per test."""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import settings as hypothesis_settings

from lakemv.catalog.declarations import SourceRegistry, load_sources
from lakemv.catalog.settings import PROJECT_ROOT, LakeSettings
from lakemv.catalog.tables import TableNames

LAKEMV = str(PROJECT_ROOT / ".venv" / "bin" / "lakemv")


# The JVMs of the `lakemv` processes the suite starts compile with C1 only: each lives seconds and
# otherwise spends most of its CPU in the C2 compiler (an `ingest --once` of 1,000 events: 50
# CPU-seconds, 28 with C1 only). So does each worker's own session JVM (the `spark` fixture): it
# lives the whole run, but runs thousands of small distinct queries, each compiled once and run on a
# few rows, where C2 spent more than it won (one worker's session JVM over the view shapes and the
# view property test: 246 CPU-seconds and 159 s with C2, 142 and 146 s with C1 only). Without
# tiered compilation the JVM reserves only 48 MB for compiled code, which a minute of ingest filled
# ("CodeCache is full. Compiler has been disabled", then executors died of VirtualMachineError):
# the 240 MB a tiered JVM reserves by default. They collect garbage on one thread (SerialGC): G1's
# concurrent threads cost more CPU than a 2 GB heap of seconds needs (a no-op `ingest --once`: 16.3
# CPU-seconds and 12.1 s with G1, 14.0 and 11.1 s with SerialGC).
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m -XX:+UseSerialGC"
os.environ.setdefault("LAKEMV_JVM_OPTIONS", SHORT_LIVED_JVM)
# So do the executors the scale-out tests' cluster starts for each application (LAKEMV_EXECUTOR_JVM_OPTIONS).
os.environ.setdefault("LAKEMV_EXECUTOR_JVM_OPTIONS", SHORT_LIVED_JVM)
# Spark runs the suite's tiny batches interpreted, in the session and in every `lakemv` process: with
# code generation each new query first compiles Java (Janino), which on a few rows costs more than it
# saves (an integration test 12% faster, a fresh `ingest --once` 20%). The rows are Spark's either way.
os.environ.setdefault("LAKEMV_SPARK_CONF", json.dumps({"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}))
# The three above only make the suite's processes cheaper: a test that clears the lakemv settings from
# a command's environment keeps them (`without_lake_settings`).
SUITE_PROCESS_SETTINGS = ("LAKEMV_JVM_OPTIONS", "LAKEMV_EXECUTOR_JVM_OPTIONS", "LAKEMV_SPARK_CONF")


def without_lake_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` without any lakemv setting but the suite's process settings (SUITE_PROCESS_SETTINGS)."""
    return {k: v for k, v in environ.items() if not k.startswith("LAKEMV_") or k in SUITE_PROCESS_SETTINGS}

# No per-example deadline: on a loaded 2-core machine a slow example is not a failure (the suite's
# own time is watched as a whole, in CI).
hypothesis_settings.register_profile("lakemv", deadline=None)
hypothesis_settings.load_profile("lakemv")


# Tests that kill a unit at each of several steps kill at a few of them in `make test`, and at every
# one with LAKEMV_TEST_EVERY_POINT=1 (docs/testing.md): each point costs a unit run again.
EVERY_POINT = os.environ.get("LAKEMV_TEST_EVERY_POINT") == "1"


def points(suite: tuple[str, ...], rest: tuple[str, ...]) -> tuple[str, ...]:
    """The crash points of a test: `suite` always, `rest` too with LAKEMV_TEST_EVERY_POINT=1."""
    return (*suite, *rest) if EVERY_POINT else suite


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests under tests/integration need Spark; tests under tests/e2e run real processes.

    Slow tests run first, longest first (`slow(seconds)`: about what one takes here), so that with
    several workers (`make test`) no long test starts last while the other workers idle.
    """
    for item in items:
        path = str(item.fspath)
        if f"{os.sep}integration{os.sep}" in path:
            item.add_marker(pytest.mark.spark)
        if f"{os.sep}e2e{os.sep}" in path:
            item.add_marker(pytest.mark.e2e)

    def expected_seconds(item: pytest.Item) -> float:
        slow = item.get_closest_marker("slow")
        return float(slow.args[0]) if slow is not None and slow.args else 0.0

    items.sort(key=expected_seconds, reverse=True)  # stable: the rest keeps pytest's order


def _seeded_folder(*args, **kwargs) -> str:
    """tempfile.mkdtemp, holding a copy of the migrated empty Prefect database as prefect_test_harness names it."""
    from lakemv.flows.prefectdb import seed

    folder = tempfile.mkdtemp(*args, **kwargs)
    seed(Path(folder), database="prefect-test.db")
    return folder


@pytest.fixture(scope="session")
def prefect_server():
    """One temporary Prefect API per test session (prefect_test_harness), for the tests that run
    flows: flows called here record their runs in it, and `lakemv` subprocesses reach it through
    PREFECT_API_URL instead of each starting a temporary API of their own. Unit tests never start it."""
    import prefect.testing.utilities as prefect_testing
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    from lakemv.flows.server import export_api_url

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # The harness's server would first migrate a new database in the folder it makes; it starts from
    # a copy of the one `make setup` migrated instead (lakemv.flows.prefectdb), as `serve` does: up
    # after 3.3-3.8 s instead of 7.2-9.8 s on an idle machine, more while the other worker starts its
    # JVM. Should Prefect rename its file, the copy goes unused and the server migrates as before.
    with mock.patch.object(prefect_testing, "mkdtemp", _seeded_folder), prefect_test_harness(server_startup_timeout=120):
        export_api_url(PREFECT_API_URL.value())  # Spark's callback thread logs to it too
        try:
            yield PREFECT_API_URL.value()
        finally:
            export_api_url(None)


@pytest.fixture(scope="session")
def sources() -> SourceRegistry:
    return load_sources(LakeSettings().sources_dirs)


def small_settings(warehouse: Path, catalog_name: str = "lake") -> LakeSettings:
    return LakeSettings(
        warehouse=warehouse, catalog_name=catalog_name, spark_master="local[2]", driver_memory="2g", shuffle_partitions=2
    )


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):
    from lakemv.spark.session import get_spark

    settings = small_settings(tmp_path_factory.mktemp("session-warehouse")).model_copy(update={"jvm_options": SHORT_LIVED_JVM})
    session = get_spark(settings)
    yield session
    session.stop()


@dataclass
class Lake:
    """A fresh catalog with its own warehouse on the shared session."""

    spark: object
    settings: LakeSettings
    sources: SourceRegistry

    @property
    def names(self) -> TableNames:
        return TableNames(self.settings.catalog_name)


@pytest.fixture
def lake(spark, tmp_path: Path, sources: SourceRegistry, monkeypatch: pytest.MonkeyPatch) -> Lake:
    """A fresh catalog; flows run in this process (they build settings from LAKEMV_* and a warehouse
    path) see the same catalog name and sizing through the environment."""
    from lakemv.spark.session import use_catalog

    settings = small_settings(tmp_path / "warehouse", f"t_{uuid.uuid4().hex[:10]}")
    for key, value in (
        ("LAKEMV_CATALOG_NAME", settings.catalog_name),
        ("LAKEMV_SPARK_MASTER", settings.spark_master),
        ("LAKEMV_DRIVER_MEMORY", settings.driver_memory),
        ("LAKEMV_SHUFFLE_PARTITIONS", str(settings.shuffle_partitions)),
    ):
        monkeypatch.setenv(key, value)
    use_catalog(spark, settings)
    return Lake(spark, settings, sources)
