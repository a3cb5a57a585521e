"""Reading what the flows recorded, straight from a Prefect API's REST endpoints (Prefect 3.8.8's own
client sends nulls for filters left out, which its server refuses)."""

from __future__ import annotations

import json
import os

import httpx


def api_url(api: str | None = None) -> str:
    """`api`, or the one this process uses (PREFECT_API_URL)."""
    return api or os.environ["PREFECT_API_URL"]


def artifacts(key: str, api: str | None = None, limit: int = 20) -> list[dict]:
    """The artifacts of `key`, newest first."""
    body = {"artifacts": {"key": {"any_": [key]}}, "sort": "CREATED_DESC", "limit": limit}
    return httpx.post(f"{api_url(api)}/artifacts/filter", json=body).json()


def latest(key: str, api: str | None = None) -> tuple[object, str]:
    """The latest artifact of `key`: its data (a table's rows parsed) and the name of the flow whose run made it."""
    found = artifacts(key, api, limit=1)
    assert found, f"no artifact {key}"
    run = httpx.get(f"{api_url(api)}/flow_runs/{found[0]['flow_run_id']}").json()
    flow = httpx.get(f"{api_url(api)}/flows/{run['flow_id']}").json()["name"]
    return (json.loads(found[0]["data"]) if found[0]["type"] == "table" else found[0]["data"]), flow


def every(kind: str, sort: str, api: str | None = None) -> list[dict]:
    """Every record of `kind` (`artifacts`, `flow_runs`) the API holds, page by page."""
    found: list[dict] = []
    while True:
        page = httpx.post(f"{api_url(api)}/{kind}/filter", json={"sort": sort, "limit": 200, "offset": len(found)}).json()
        found += page
        if len(page) < 200:
            return found
