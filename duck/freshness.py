"""Each view's freshness over a recent window, read off the ledger with DuckDB (no Spark).

The rule is `lakemv.core.batch.freshness`; this reads the ledger rows it needs: those finished since
the window began, and a view's budget before it (a change may have waited since then).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.tables import LEDGER, OPS_NAMESPACE
from lakemv.core.batch.freshness import Freshness, LedgerRow, view_freshness
from lakemv.duck.query import connect_duckdb
from lakemv.duck.status import lake_table


def ledger_rows(settings: LakeSettings, since: datetime) -> list[LedgerRow]:
    """The ledger's rows finished at or after `since` (none while the ledger has no snapshot)."""
    ledger = lake_table(settings, OPS_NAMESPACE, LEDGER)
    if not ledger.scan:
        return []
    con = connect_duckdb(settings=settings)
    try:
        found = con.execute(
            "SELECT epoch(finished_at), "
            "  [struct_extract(t, 'name') FOR t IN tables IF struct_extract(t, 'changes') > 0], "
            "  [epoch(struct_extract(t, 'max_source_ts')) FOR t IN tables IF struct_extract(t, 'changes') > 0], "
            "  [struct_extract(v, 'name') FOR v IN views] "
            f"FROM {ledger.scan} WHERE finished_at >= ? ORDER BY finished_at",
            [since],
        ).fetchall()
    finally:
        con.close()
    return [LedgerRow(at, dict(zip(names or [], times or [], strict=True)), frozenset(views or ())) for at, names, times, views in found]


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
