"""The unit tier is fast by construction: no JVM and no Prefect server may start in it.

Checked around the `tests/unit` package (in a whole-suite run other tiers start both, legitimately,
before or after it): what did not run when the tier began must not run when it ends.
"""

from __future__ import annotations

import sys

import pytest

from lakemv.catalog.declarations import SourceRegistry
from lakemv.catalog.settings import LakeSettings
from lakemv.core.planner import ViewPlan, plan_view
from lakemv.core.planner.definitions import load_views


def _jvm_running() -> bool:
    context = sys.modules.get("pyspark.core.context")
    return context is not None and context.SparkContext._gateway is not None


def _prefect_test_server_loaded() -> bool:
    return "prefect.testing.utilities" in sys.modules


@pytest.fixture(scope="package", autouse=True)
def _no_jvm_no_server():
    jvm, server = _jvm_running(), _prefect_test_server_loaded()
    yield
    assert jvm or not _jvm_running(), "a unit test started a JVM"
    assert server or not _prefect_test_server_loaded(), "a unit test started a Prefect test server"


@pytest.fixture(scope="module")
def plans(sources: SourceRegistry) -> dict[str, ViewPlan]:
    """The plans of the project's own views."""
    return {name: plan_view(view, sources) for name, view in load_views(LakeSettings().view_dirs).items()}
