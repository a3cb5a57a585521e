"""End-to-end tests run `lakemv` flow commands: they share the session's Prefect API."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.forked_cli import ForkedCli


@pytest.fixture(autouse=True)
def _shared_prefect_api(prefect_server: str) -> str:
    return prefect_server


@pytest.fixture(scope="session")
def forked_cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkedCli]:
    """Commands that fail in their first second, each in a child forked from one process (tests/e2e/forked_cli.py)."""
    forked = ForkedCli(tmp_path_factory.mktemp("forked-cli"))
    yield forked
    forked.close()
