"""The unit tier is fast by construction: no JVM and no Prefect server may start in it."""

from __future__ import annotations

import sys

import pytest


@pytest.fixture(scope="session", autouse=True)
def _no_jvm_no_server():
    yield
    context = sys.modules.get("pyspark.core.context")
    assert context is None or context.SparkContext._gateway is None, "a unit test started a JVM"
    assert "prefect.testing.utilities" not in sys.modules, "a unit test started a Prefect test server"
