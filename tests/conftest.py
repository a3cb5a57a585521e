"""Shared fixtures: one SparkSession per test session, a fresh catalog + warehouse per test."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from catalog.declarations import SourceRegistry, load_sources
from catalog.settings import PROJECT_ROOT, LakeSettings
from catalog.tables import TableNames

LAKEMV = str(PROJECT_ROOT / ".venv" / "bin" / "lakemv")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests under tests/integration need Spark; tests under tests/e2e run real processes."""
    for item in items:
        path = str(item.fspath)
        if f"{os.sep}integration{os.sep}" in path:
            item.add_marker(pytest.mark.spark)
        if f"{os.sep}e2e{os.sep}" in path:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def prefect_server():
    """One temporary Prefect API per test session (prefect_test_harness), for the tests that run
    flows: flows called here record their runs in it, and `lakemv` subprocesses reach it through
    PREFECT_API_URL instead of each starting a temporary API of their own. Unit tests never start it."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    with prefect_test_harness(server_startup_timeout=120):
        os.environ["PREFECT_API_URL"] = PREFECT_API_URL.value()
        try:
            yield PREFECT_API_URL.value()
        finally:
            os.environ.pop("PREFECT_API_URL", None)


@pytest.fixture(scope="session")
def sources() -> SourceRegistry:
    return load_sources(LakeSettings().sources_dirs)


def small_settings(warehouse: Path, catalog_name: str = "lake") -> LakeSettings:
    return LakeSettings(
        warehouse=warehouse, catalog_name=catalog_name, spark_master="local[2]", driver_memory="2g", shuffle_partitions=2
    )


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):
    from spark.session import get_spark

    session = get_spark(small_settings(tmp_path_factory.mktemp("session-warehouse")))
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
    from spark.session import use_catalog

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
