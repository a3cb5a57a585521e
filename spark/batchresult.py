"""What one batch did: the result a processed unit returns, for the CLI and the flow's log."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from spark.maintain import ViewResult


@dataclass(frozen=True)
class BatchResult:
    """What one batch did: lines read, events parsed, changes merged per table, rejects, time."""

    batch_id: int
    lines: int
    events: int
    merged: Mapping[str, int] = field(default_factory=dict)
    dead_letters: int = 0
    unique_violations: int = 0  # values of declared unique keys several live rows hold (their changes are dead letters too)
    skipped: int = 0
    skip_reasons: Mapping[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    views: Mapping[str, ViewResult] = field(default_factory=dict)
    chunk: int = 0
    replayed: bool = False  # a crash interrupted an earlier attempt of this unit
    already_committed: bool = False  # ... which had finished: nothing was left to do
    conflicts_retried: int = 0
    notes: tuple[str, ...] = ()  # schema drift: columns added, columns missing, views affected
    steps: Mapping[str, float] = field(default_factory=dict)  # seconds per step (parse, plan, mirrors, views, ledger)
    set_wise: bool = False  # Spark parsed the unit's lines (spark.bulk)
    waited: float = 0.0  # seconds the unit waited for a compaction turn to end (catalog.writer.CommitTurns)

    def describe(self) -> str:
        name = f"batch {self.batch_id}" + (f".{self.chunk}" if self.chunk else "")
        if self.already_committed:
            return f"{name}: replayed, already committed ({self.lines} lines), {self.seconds:.2f}s"
        tables = ", ".join(f"{t} {n}" for t, n in sorted(self.merged.items())) or "no changes"
        views = "".join(
            f"; {v.view} {v.note}" if v.paused
            else f"; {v.view} {v.keys} keys -> {v.upserts} upserts, {v.deletes} deletes" + (f" ({v.note})" if v.note else "")
            for v in self.views.values()
        )  # fmt: skip
        extra = (" (set-wise)" if self.set_wise else "") + (" (replayed)" if self.replayed else "") + (
            f", {self.conflicts_retried} commit conflicts retried" if self.conflicts_retried else ""
        ) + (f", waited {self.waited:.1f}s for compaction" if self.waited >= 0.1 else "")
        reasons = ", ".join(f"{n} {r}" for r, n in sorted(self.skip_reasons.items()))
        skipped = f"{self.skipped} skipped" + (f" ({reasons})" if reasons else "")
        unique = f" ({self.unique_violations} unique violations)" if self.unique_violations else ""
        return (
            f"{name}{extra}: {self.lines} lines, {self.events} events -> {tables}; "
            f"{self.dead_letters} dead letters{unique}, {skipped}{views}, {self.seconds:.2f}s"
        )
