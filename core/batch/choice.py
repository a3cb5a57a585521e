"""Incremental or whole: how a batch maintains a view, whichever is predicted to cost less.

A batch that reaches a view's keys can recompute just those keys (gather the rows they read, run the
view's SQL over them, diff, write) or recompute the whole view (its SQL over the mirrors, diffed
against the table, written, the state's digests reloaded). Each way's seconds are modelled as a line,

    incremental:  fixed + per key x keys reached
    whole:        fixed + per row x the view's rows

which starts as a prior (figures measured on the benchmark machine, `PRIORS`) and is then scaled by
what this view's own batches measured: by the weighted mean of measured / predicted over the view's
last `KEPT` observations of that way (the newest weighing 1, each older one DECAY times the next) and
the prior itself (ratio 1, weight 1). A few batches of a view whose keys cost far more than the prior
(large groups, wide rows, a many-way join) scale its line there; a way never taken keeps its prior.
One factor per line, not a free fit: batches of one view reach similar numbers of keys, too close
together to tell a fixed cost from a per-key one. The step that finds the keys is the same for both
ways and is not part of either measurement.

The batch takes the cheaper prediction and says which and why (`Choice.reason`): in its batch line and
in the ledger. A view that may not be recomputed whole (events enriched as of processing time, views
whose rows settle) is always incremental.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

INCREMENTAL = "incremental"
WHOLE = "whole"
KEPT = 8  # observations kept per view and way
DECAY = 0.8


@dataclass(frozen=True)
class Line:
    """seconds = (fixed + per_unit x size) x scale; the prior has scale 1."""

    fixed: float
    per_unit: float
    scale: float = 1.0

    def at(self, size: float) -> float:
        return (self.fixed + self.per_unit * size) * self.scale


# Measured with the local state (bench.profile, 2 cores): a reached key ~0.3 ms on top of ~0.25 s of
# Spark job and commits; a whole recompute ~60 us per view row on top of ~0.8 s (13.6k keys of 100k
# users: 4.5 s incrementally, 8.2 s whole, 2026-11-24). Without it (scans of the mirrors and MERGEs):
# ~0.25 ms per key on ~0.7 s; whole ~3.5 s per 100k rows at 100k users and 13 s per 1M rows at 1M.
PRIORS: Mapping[str, Mapping[str, Line]] = {
    "indexed": {INCREMENTAL: Line(0.25, 0.3e-3), WHOLE: Line(0.8, 60e-6)},
    "scan": {INCREMENTAL: Line(0.7, 0.25e-3), WHOLE: Line(1.5, 20e-6)},
}

# The priors' keys read ~8 rows each (user_profile at 100k users: 6,967 keys read 53,676 rows): a view
# whose keys are sized by the rows they read (a key that is an expression or a constant may stand for
# a month of rows, or the whole table) counts this many rows as one key of the incremental line.
ROWS_PER_KEY = 8
# A row read beyond those costs about 1/ROW_SHARE of a key: ~9.4 us a row (gathered, recomputed) against
# ~0.3 ms a key (TPC-H at scale 0.1, 2026-12-02: Q21's 882 keys read 1.87M rows in ~18 s, Q10's 845 keys
# 58k rows in ~0.7 s, user_profile's keys ~8 rows each at ~0.3 ms).
ROW_SHARE = 32


def sized(keys: int, rows: float) -> int:
    """The incremental line's size for `keys` keys that read `rows` rows: the keys, plus the rows beyond
    `ROWS_PER_KEY` a key at 1/`ROW_SHARE` of a key each (a key standing for many rows passes keys=0)."""
    return keys + max(0, int(rows) - ROWS_PER_KEY * keys) // ROW_SHARE


# Priors that pin every batch to one way, whatever it measures (tests of each path).
ALWAYS_WHOLE: Mapping[str, Mapping[str, Line]] = {way: {INCREMENTAL: Line(1e9, 0.0), WHOLE: Line(0.0, 0.0)} for way in PRIORS}
ALWAYS_INCREMENTAL: Mapping[str, Mapping[str, Line]] = {way: {INCREMENTAL: Line(0.0, 0.0), WHOLE: Line(1e9, 0.0)} for way in PRIORS}

# A view whose aggregates follow deltas adds up a unit's signed rows when they are at most this many times
# the rows recomputing its reached groups reads (both estimated from the local state); tests pin either way.
DELTA_OVER_GROUPS = 1.0


def by_delta(signed: float, groups: float) -> bool:
    """Whether adding up `signed` rows is predicted to cost less than recomputing groups that read `groups` rows."""
    return DELTA_OVER_GROUPS == math.inf or signed <= DELTA_OVER_GROUPS * groups


Observation = tuple[float, float]  # (size, seconds)


def fit(prior: Line, observed: Sequence[Observation]) -> Line:
    """The prior scaled by `observed` (oldest first, as (size, seconds)); see the module docstring."""
    weight, ratios = 1.0, 1.0
    for age, (size, seconds) in enumerate(reversed(observed)):
        predicted = prior.at(size)
        if predicted > 0:
            weight += DECAY**age
            ratios += DECAY**age * seconds / predicted
    return Line(prior.fixed, prior.per_unit, ratios / weight)


def kept(observed: Iterable[Observation], new: Observation) -> list[Observation]:
    """`observed` with `new` added, the oldest dropped past KEPT."""
    return [*observed, new][-KEPT:]


@dataclass(frozen=True)
class Choice:
    """The way a batch maintains a view, the two predictions and why."""

    plan: str  # INCREMENTAL or WHOLE
    incremental: float  # predicted seconds
    whole: float | None  # None: not predicted (a whole recompute is not allowed, or could not win)
    reason: str


def choose(lines: Mapping[str, Line], keys: int, rows: int | None, measured: Mapping[str, int], refused: str | None = None) -> Choice:
    """The cheaper way for `keys` reached keys of a view of `rows` rows (None: not counted, because the
    incremental prediction is below a whole recompute's fixed cost), unless `refused` says why it may
    not be whole. `measured`: observations behind each line, for the reason."""
    incremental = lines[INCREMENTAL].at(keys)
    if refused is not None:
        return Choice(INCREMENTAL, incremental, None, f"incremental: never whole, {refused}")
    basis = "; ".join(f"{way} calibrated x{lines[way].scale:.2g} over {n} batches" for way, n in sorted(measured.items()) if n)
    basis = f"; {basis}" if basis else ""
    if rows is None:
        return Choice(INCREMENTAL, incremental, None, f"incremental ~{incremental:.2f}s < any whole recompute{basis}")
    whole = lines[WHOLE].at(rows)
    if whole < incremental:
        return Choice(WHOLE, incremental, whole, f"whole ~{whole:.2f}s for {rows:,} rows < incremental ~{incremental:.2f}s{basis}")
    return Choice(INCREMENTAL, incremental, whole, f"incremental ~{incremental:.2f}s < whole ~{whole:.2f}s for {rows:,} rows{basis}")


def needs_rows(lines: Mapping[str, Line], keys: int) -> bool:
    """Whether the view's row count can change the choice: only when the incremental prediction is
    above a whole recompute's fixed cost (counting rows costs a statement or a Spark job)."""
    return lines[INCREMENTAL].at(keys) > lines[WHOLE].at(0)


class Costs:
    """One view's lines in one process, fitted from its observations; `observe` adds one and refits.

    The view's first maintenance in a process is not an observation: it also pays the JVM's first
    runs of its code (class loading, compiling), several times a warm one."""

    def __init__(self, priors: Mapping[str, Line], observed: Mapping[str, Sequence[Observation]] | None = None):
        self.priors = priors
        self.observed = {way: list((observed or {}).get(way, ())) for way in priors}
        self.lines = {way: fit(priors[way], self.observed[way]) for way in priors}
        self.warm = False  # maintained once in this process

    def measured(self) -> dict[str, int]:
        return {way: len(found) for way, found in self.observed.items()}

    def choose(self, keys: int, rows: Callable[[], int], refused: str | None = None) -> Choice:
        """The cheaper way for `keys` reached keys; `rows` counts the view's rows when that matters."""
        if refused is not None or not needs_rows(self.lines, keys):
            return choose(self.lines, keys, None, self.measured(), refused)
        return choose(self.lines, keys, rows(), self.measured())

    def observe(self, way: str, size: Callable[[], float], seconds: float) -> list[Observation] | None:
        """Add what `way` cost (`size` is asked for only then); the way's observations now, or None for
        the process's first maintenance of the view, which is not kept."""
        if not self.warm:
            self.warm = True
            return None
        self.observed[way] = kept(self.observed[way], (float(size()), float(seconds)))
        self.lines[way] = fit(self.priors[way], self.observed[way])
        return self.observed[way]


# The engine state's batch (lakemv.spark.engine; bench.engine_batch, 100k users, 2 cores, 2026-12-05):
# a row a view's walk gathers costs ~13 us of the batch's wall through the gather and the recompute
# (2.10M rows in ~27 s); a view recomputed whole over the mirrors costs a Spark query (~0.3 s) and
# ~1.5 us a row its tables hold.
ENGINE_PRIORS: Mapping[str, Line] = {INCREMENTAL: Line(0.0, 13e-6), WHOLE: Line(0.3, 1.5e-6)}
# A batch that reaches keys pays the walks' rounds (reach and gather: ~2.2 s and ~1.0 s of jobs at one
# view, ~20 us more per changed row: 4.6 s for 113k changed rows); one that recomputes every view whole
# reaches none but diffs each view against all of its digests, a scan of the state (~2.7 us an entry).
ENGINE_ROUNDS = Line(3.0, 20e-6)
ENGINE_SCAN = Line(0.3, 2.7e-6)
# How far one batch's measured rows per key move a view's estimate (the rest is the estimate before).
LEARN = 0.5


class Ways:
    """The engine's way for each view of a batch: `incremental` gathers the rows its reached keys read
    (predicted as keys x the view's rows per key), `whole` runs its SQL over the mirrors (its tables'
    rows). Rows per key start from a full recompute (its tables' rows over the view's rows) and follow
    what the batches gather; `refused` names the views that may not be whole, and why."""

    def __init__(
        self,
        per_key: Mapping[str, float],
        table_rows: Mapping[str, int],
        priors: Mapping[str, Line] = ENGINE_PRIORS,
        refused: Mapping[str, str] | None = None,
        reads: Mapping[str, Sequence[str]] | None = None,
        rows_of: Mapping[str, int] | None = None,
    ):
        self.per_key = dict(per_key)
        self.table_rows = dict(table_rows)
        self.priors = priors
        self.refused = dict(refused or {})
        self.reads = {view: sorted(set(tables)) for view, tables in (reads or {}).items()}  # the tables each view reads
        self.rows_of = dict(rows_of or {})  # each table's rows

    @classmethod
    def seeded(cls, tables: Mapping[str, Sequence[str]], view_rows: Mapping[str, int], table_rows: Mapping[str, int], **kwargs: object) -> Ways:
        """Rows per key from a full recompute: the rows of the tables each view reads (`tables`: per view,
        one name per occurrence) over the view's rows."""
        whole = {view: sum(table_rows.get(t, 0) for t in read) for view, read in tables.items()}
        per_key = {view: rows / max(1, view_rows.get(view, 0)) for view, rows in whole.items()}
        return cls(per_key, whole, reads=tables, rows_of=table_rows, **kwargs)  # type: ignore[arg-type]

    def ahead(self, changed: Mapping[str, int]) -> dict[str, Choice]:
        """Each view's way predicted before its keys are reached, from the rows a batch changes per table
        (`changed`): a view whose tables changed by a share s (its most changed table's rows changed over
        its rows) reaches about that share of its keys, so gathering is predicted as s x its tables'
        rows. A view predicted whole here needs no reached keys; a batch whose every view is, a backlog
        or a snapshot, reaches none (`Recompute.whole`, `Recompute.diff_whole`). A view none of whose
        tables changed is not in the answer."""
        chosen = {}
        for view, tables in self.reads.items():
            shares = [min(1.0, changed[t] / max(1, self.rows_of.get(t, 0))) for t in tables if changed.get(t)]
            if shares:
                size = self.table_rows.get(view, 0)
                chosen[view] = choose(self.priors, round(max(shares) * size), size, {}, self.refused.get(view))
        return chosen

    def choose(self, keys: Mapping[str, int]) -> dict[str, Choice]:
        """Each reached view's way for `keys` keys reached (per view)."""
        return {
            view: choose(self.priors, round(n * self.per_key.get(view, ROWS_PER_KEY)), self.table_rows.get(view), {}, self.refused.get(view))
            for view, n in keys.items()
        }

    def batch(self, changed: Mapping[str, int], entries: int) -> Choice:
        """The batch's way from the rows it changes per table (`changed`) and the state's entries: `whole`
        (every view it reaches recomputed whole, no keys reached: a backlog, a snapshot) when that is
        predicted to cost less than the walks' rounds plus each view's cheaper way (`ahead`). A view
        that may not be recomputed whole keeps the batch incremental."""
        chosen = self.ahead(changed)
        rows = sum(changed.values())
        rounds = ENGINE_ROUNDS.at(rows)
        incremental = rounds + sum(min(c.incremental, c.whole or math.inf) for c in chosen.values())
        refused = sorted(view for view, c in chosen.items() if c.whole is None)
        if not chosen or refused:
            why = f"never whole: {', '.join(refused)}" if refused else "no view reached"
            return Choice(INCREMENTAL, incremental, None, f"incremental: {why}")
        whole = ENGINE_SCAN.at(entries) + sum(c.whole or 0.0 for c in chosen.values())
        if whole < incremental:
            return Choice(
                WHOLE, incremental, whole, f"whole ~{whole:.2f}s for {len(chosen)} views < rounds ~{rounds:.2f}s + views ~{incremental - rounds:.2f}s"
            )
        return Choice(
            INCREMENTAL,
            incremental,
            whole,
            f"rounds ~{rounds:.2f}s + views ~{incremental - rounds:.2f}s < whole ~{whole:.2f}s for {len(chosen)} views",
        )

    def observe(self, keys: Mapping[str, int], gathered: Mapping[str, int]) -> None:
        """What a batch's incremental views gathered (per view) for the keys they reached."""
        for view, rows in gathered.items():
            if keys.get(view):
                measured = rows / keys[view]
                self.per_key[view] = (1 - LEARN) * self.per_key.get(view, measured) + LEARN * measured
