"""End-to-end tests run `lakemv` flow commands: they share the session's Prefect API."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _shared_prefect_api(prefect_server: str) -> str:
    return prefect_server
