"""Hand-built Debezium lines for tests (independent of the workload generator)."""

from __future__ import annotations

import json
from typing import Any


def dbz(op: str, lsn: int, after: dict[str, Any] | None = None, before: dict[str, Any] | None = None, wrapped: bool = False) -> str:
    payload = {"before": before, "after": after, "source": {"connector": "postgresql", "lsn": lsn, "ts_ms": 1_700_000_000_000 + lsn}, "op": op, "ts_ms": 1_700_000_000_000 + lsn}
    return json.dumps({"schema": {"type": "struct", "name": "x.Envelope"}, "payload": payload} if wrapped else payload)


def user(email: str, username: str, id: int = 1, registered_at: int | None = 1_709_294_400_000_000) -> dict[str, Any]:  # noqa: A002
    return {"id": id, "email": email, "username": username, "registered_at": registered_at}


def at(table: str, name: str = "part-0.json") -> str:
    return f"file:///landing/{table}/{name}"
