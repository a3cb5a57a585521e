"""Each view's freshness over a recent window, read off the ledger (no Spark).

The rule is `lakemv.core.batch.freshness`; this reads the ledger rows it needs: those finished since
the window began, and a view's budget before it (a change may have waited since then).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.expressions import GreaterThanOrEqual

from lakemv.catalog.lake import pyiceberg_catalog
from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.tables import LEDGER, OPS_NAMESPACE
from lakemv.core.batch.freshness import Freshness, LedgerRow, view_freshness


def ledger_rows(settings: LakeSettings, since: datetime) -> list[LedgerRow]:
    """The ledger's rows finished at or after `since` (none while the ledger does not exist). Read by
    pyiceberg's scan: a few rows an hour, and no DuckDB connection to start (a third of a second)."""
    try:
        ledger = pyiceberg_catalog(settings).load_table((OPS_NAMESPACE, LEDGER))
    except (NoSuchTableError, NoSuchNamespaceError):
        return []
    rows = ledger.scan(row_filter=GreaterThanOrEqual("finished_at", since.isoformat()), selected_fields=("finished_at", "tables", "views"))
    found = []
    for row in rows.to_arrow().to_pylist():
        tables = {t["name"]: _epoch(t["max_source_ts"]) for t in row["tables"] or () if t["changes"]}
        found.append(LedgerRow(_epoch(row["finished_at"]), tables, frozenset(v["name"] for v in row["views"] or ())))
    return found


def _epoch(moment: datetime | None) -> float | None:
    return None if moment is None else (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def freshness(
    settings: LakeSettings,
    reads: Mapping[str, Sequence[str]],
    budgets: Mapping[str, float | None],
    window_seconds: float = 3600.0,
    now: datetime | None = None,
) -> dict[str, Freshness]:
    """Per view (name -> the source tables it reads, through the views it reads), its lag at each unit
    of the last `window_seconds` that showed it changes, and now; `budgets` in seconds."""
    now = now or datetime.now(UTC)
    end = now.timestamp()
    since = end - window_seconds
    lookback = max((b for b in budgets.values() if b is not None), default=0.0)
    rows = ledger_rows(settings, datetime.fromtimestamp(since - lookback, UTC))
    return view_freshness(rows, reads, budgets, end, since)
