"""The per-batch view step over the local state: no Iceberg table is scanned.

For each view the store serves (`lakemv.core.state.layout.route`): the keys the batch's images reach and
the rows those keys read come from the store (`IndexedView.prepare`); Spark runs the view's own SQL
over just those rows (as small local relations, so the engine and the invariant are the ones of a full
recompute), every view the batch reached in one job per core (`lakemv.spark.views.together`); each recomputed
row's digest is compared with the stored one; only the rows that differ go to the change feed and the
view (`IndexedView.finish`), and their digests into the store after that commit.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Set
from dataclasses import replace

import pyarrow as pa
from pyspark.sql import SparkSession

from lakemv.catalog.viewstate import ViewState
from lakemv.core.batch import choice as cost_choice
from lakemv.core.batch import deferral
from lakemv.core.batch.choice import INCREMENTAL, WHOLE, Choice, Costs
from lakemv.core.batch.result import ViewResult
from lakemv.core.planner import over
from lakemv.core.planner.finality import final_rows_sql
from lakemv.core.planner.model import holds_columns
from lakemv.core.runtime.faults import crash_point
from lakemv.core.sql.quote import q, spark_string
from lakemv.core.state.codec import Values, rows_of, to_arrow
from lakemv.core.state.layout import Route
from lakemv.core.state.places import Location
from lakemv.core.state.walk import DirectKeys, direct_keys, gather, project_keys, reach
from lakemv.spark.batch.sync import DIGEST, StoreSync, digest_sql
from lakemv.spark.commits import WriteUnit
from lakemv.spark.directwrite import Committed
from lakemv.spark.views.delta import IndexedDelta
from lakemv.spark.views.kept import MARK, KeptPlans, Run, run_kept
from lakemv.spark.views.maintain import ViewMaintainer, Writing
from lakemv.spark.views.rowdiff import Diff, Diffed, diff_rows
from lakemv.spark.views.sizing import Sizing
from lakemv.spark.views.together import TAG, VIEW, Gathered, part_schema
from lakemv.spark.views.whole import write_whole

_OCCURRENCE = re.compile(r"\b_lmv_occ_(\d+)\b")


class IndexedView(Sizing):
    """Maintains one view from the store (see the module docstring)."""

    def __init__(self, maintainer: ViewMaintainer, route: Route, sync: StoreSync, grain: Route | None):
        """`grain`: the view's route from its grain (`lakemv.core.state.layout.grain_route`), when it has one."""
        self.maintainer = maintainer
        self.plan = maintainer.plan
        self.route = route
        self.sync = sync
        self.store = sync.store
        self.spark: SparkSession = maintainer.spark
        self.name = f"view:{self.plan.name}"
        self._prefix = f"_lmv_{self.plan.name}_occ_"
        self._body = _OCCURRENCE.sub(lambda m: f"{self._prefix}{m.group(1)}", self.plan.body)
        self._schema: pa.Schema | None = None
        self.settle = sync.store.views[self.plan.name].settle if self.plan.name in sync.store.views else None
        self.budget: int | None = None  # the freshness budget (micros) it waits for, when it may wait
        self._once = False  # the budget is 0 until the view catches up once (catch_up_once)
        self.costs: Costs | None = None  # what maintaining it cost lately, read from the state at first use
        self.kept = KeptPlans(self.spark)  # its recompute and key evaluation as Spark planned them
        self._direct: dict[int, DirectKeys | None] = {}  # per anchor: how the driver finds its keys, if it can
        # A key may stand for many anchor rows (`_size`): an expression, a constant, a group missing the anchor's key (TPC-H Q1).
        pk = maintainer.sources[self.plan.occurrence(self.plan.anchor).table].primary_key
        self.by_rows = bool(route.derived) or (not self.plan.branches and not holds_columns(self.plan.keys, pk))
        self.delta = IndexedDelta.of(self, grain)  # its aggregates by delta, when they qualify (lakemv.spark.views.delta)

    def view_schema(self) -> pa.Schema:
        if self._schema is None:
            from pyspark.sql.pandas.types import to_arrow_schema

            self._schema = to_arrow_schema(self.spark.table(self.maintainer.table).schema)
        return self._schema

    def key_schema(self) -> pa.Schema:
        return pa.schema([self.view_schema().field(k) for k in self.plan.key_names])

    def prepare(
        self, images: Mapping[str, list[Values]], unit: WriteUnit, position: int | None, state: ViewState, now: int = 0, gap: int = 0,
        updated: Mapping[str, list[list[str] | None]] | None = None, hold: bool = False, signs: Mapping[str, list[int]] | None = None,
    ) -> ViewResult | Gathered:
        """The keys the images reach and the rows they read, ready for the view's recompute; or the
        step's result when there is nothing to recompute incrementally (no key reached, keys deferred,
        a whole recompute chosen and written).
        A view with a freshness `budget` adds them to its pending keys instead until it is due: the
        batch starts at `now` (epoch micros), the next is expected `gap` micros later. `updated`: per
        table, the columns each image's update changed (lakemv.core.cdc.effects.CHANGED): an update of
        columns the view does not read reaches none of its keys. `hold`: more units of the batch follow
        (a backlog): a view that can wait adds its keys to its pending keys whatever its budget, and is
        due at the first unit that does not hold (lakemv.core.batch.deferral), diffed whole if the state
        does not know what is pending (rebuilt, or the keys outgrew an incremental maintenance). `signs`:
        per table, each image's sign, which a view whose aggregates follow deltas adds up."""
        started = time.perf_counter()
        holds = hold and deferral.refusal(self.plan, indexed=True) is None
        if holds and not self.store.knows_pending(self.plan.name):  # diffed whole when due: what this unit reaches makes no difference
            self._hold()
            return ViewResult(self.plan.name, 0, seconds=time.perf_counter() - started, deferred=True, note=deferral.WHOLE_DUE)
        parts, raw = self.store.mirrors, images
        images = {t: self._reaching(t, images[t], (updated or {}).get(t)) for t in images if self.plan.reached_by(t)}
        keys, anchor_rows = reach(self.plan, self.route, parts, self.store, images)
        if anchor_rows:
            keys |= self._evaluate_keys(anchor_rows)
        closing = self.maintainer.closing_query()
        if closing is not None:  # windows the watermark closed: their rows turn final
            keys |= set(rows_of(self.spark.sql(closing).toArrow(), self.plan.key_names))
        steps = {"keys": time.perf_counter() - started}
        crash_point(f"keys:{self.plan.name}", unit.batch_id)
        delta, whole, choice, sized = self.delta, False, None, None
        if keys and delta is not None and not holds and self.budget is None and delta.ready(signs, images):
            estimate, sized = delta.estimate(images), self._size(keys)
            if cost_choice.by_delta(estimate, sized.rows):  # when it reads fewer rows than recomputing the keys' groups
                choice = self._choose(keys, signed=int(estimate))
            if choice is not None and choice.plan == INCREMENTAL:
                clock = time.perf_counter()
                signed = delta.signed(raw, signs, images, (updated or {}).get(delta.table), unit.write_id)  # type: ignore[arg-type]
                steps["rows"] = time.perf_counter() - clock
                reason = f"aggregates by delta over {len(signed)} changed rows (~{int(estimate):,} estimated; their groups read ~{int(sized.rows):,})"
                choice = replace(choice, reason=f"{reason}: {choice.reason}")
                return Gathered(self, sorted(keys, key=repr), {}, choice, Writing(len(keys), position, unit, started, steps, state), signed)
        if holds:  # (a unit that reaches none of its keys holds nothing)
            if keys:
                self._hold(keys, now, unit.batch_id)
            return ViewResult(self.plan.name, len(keys), seconds=time.perf_counter() - started, steps=steps, deferred=bool(keys), note=deferral.HELD if keys else None)
        if self.budget is not None:  # a view that waits for its freshness budget (lakemv.core.batch.deferral)
            pending = self.store.pending(self.plan.name)
            if not deferral.is_due(pending, now, self.budget, gap):
                if not keys and not pending.keys:  # nothing waits: the view is current
                    return ViewResult(self.plan.name, 0, seconds=time.perf_counter() - started, steps=steps)
                if keys:
                    self.store.defer(self.plan.name, keys, now)
                    crash_point(f"deferred:{self.plan.name}", unit.batch_id)
                note = deferral.waiting(deferral.waiting_since(pending, now), now, self.budget)
                return ViewResult(self.plan.name, len(keys), seconds=time.perf_counter() - started, steps=steps, deferred=True, note=note)
            keys |= set(pending.keys)
            whole = not pending.known  # the state lost what was pending: diff the whole view
        if not keys and not whole:
            return ViewResult(self.plan.name, 0, seconds=time.perf_counter() - started, steps=steps)
        if not whole and choice is None:
            sized = sized or self._size(keys)
        choice = Choice(WHOLE, 0.0, None, "its pending keys were not known") if whole else choice or self._choose(keys, sized=sized)
        if choice.plan == WHOLE:  # lakemv.spark.views.whole
            result = write_whole(self, Writing(None if whole else len(keys), position, unit, started, steps, state))
            if self.delta is not None:
                self.delta.forget()  # (built again from the mirror by the next unit)
            if result.paused:
                return result
            seconds = time.perf_counter() - started
            self._measured(WHOLE, lambda: self.store.view_count(self.plan.name), seconds - steps["keys"])
            return replace(result, seconds=seconds, plan=WHOLE, reason=choice.reason, note=f"recomputed in full: {choice.reason}")
        clock = time.perf_counter()
        ordered = sorted(keys, key=repr)
        found = sized.rows_of(ordered) if sized is not None else None  # (read once, to size a small batch)
        rows = found if found is not None else gather(self.plan, self.route, parts, self.store, ordered)
        steps["rows"] = time.perf_counter() - clock
        return Gathered(self, ordered, rows, choice, Writing(len(keys), position, unit, started, steps, state))

    def diff(self, gathered: Gathered, new: pa.Table, seconds: float) -> Diffed:
        """Diff the view's recomputed rows (`new`, computed in `seconds`: its share of the batch's
        recompute) against the stored digests; with its feed rows when its writes are direct commits
        (the batch commits every view's feed rows in one, `lakemv.spark.views.feeds`)."""
        clock = time.perf_counter()
        steps = gathered.writing.steps
        steps["recompute"] = seconds
        keys = gathered.keys
        if self.delta is not None:
            new, keys = self._states(gathered, new)
        diff = self.diff_rows(new, keys)
        steps["diff"] = time.perf_counter() - clock
        direct = self.maintainer.direct is not None and diff.rows.num_rows > 0
        feed = self.maintainer.feed_part(diff.rows, gathered.writing) if direct else None
        return Diffed(diff, feed, seconds, time.perf_counter() - clock)

    def finish(self, gathered: Gathered, diffed: Diffed, fed: bool) -> ViewResult:
        """Write what `diff` found changed (`write`; its feed rows too, unless `fed`: the batch's one
        feed commit holds them)."""
        began = time.perf_counter()
        writing, steps = gathered.writing, gathered.writing.steps
        writing.fed = fed
        result = self.write(diffed.diff, writing)
        if result.paused:
            return result
        # its own time: its keys and rows, its share of the recompute, its diff and writes (not the others')
        seconds = steps["keys"] + steps["rows"] + diffed.seconds + diffed.diff_seconds + (time.perf_counter() - began)
        self._measured(INCREMENTAL, lambda: self._rows_sized(gathered), seconds - steps["keys"])
        return replace(result, seconds=seconds, rows_read=gathered.rows_read, plan=INCREMENTAL, reason=gathered.choice.reason)

    def write(self, diff: Diff, writing: Writing) -> ViewResult:
        """Write a diff into the view (and its feed rows, unless `writing.fed`), then its digests into
        the store; a diff of nothing writes nothing."""
        writing.held, unit = len(diff.duplicated), writing.unit
        if diff.rows.num_rows == 0:
            if self.delta is not None:
                self.delta.commit(unit.write_id)
            self.caught_up()
            return ViewResult(self.plan.name, writing.count, steps={k: round(v, 3) for k, v in writing.steps.items()}, held=writing.held)
        result = self.maintainer.write_diff(diff.rows, writing, lambda refresh: self.places(diff.held, unit, refresh))
        if result.paused:  # superseded by a backfill: the store reloads the view when it sees its publish
            return result
        clock = time.perf_counter()
        self.record(diff, unit, writing.committed)
        if self.delta is not None:  # after the view's commit: a replay reads the states before the unit
            self.delta.commit(unit.write_id)
        crash_point(f"state:{self.plan.name}", unit.batch_id)
        return replace(result, steps={**result.steps, "state": round(time.perf_counter() - clock, 3)})

    def _reaching(self, table: str, rows: list[Values], changed: list[list[str] | None] | None) -> list[Values]:
        """The images of `table` whose change the view can see (all, when what changed is not known)."""
        if changed is None:
            return rows
        return [row for row, columns in zip(rows, changed, strict=True) if self.plan.reached_by_change(table, columns)]

    def places(self, held: list[Values], unit: WriteUnit, refresh: bool) -> tuple[int | None, list[Location]]:
        """Where the view rows of `held` live, and the view snapshot the store reflects (what the
        diff was computed against); with `refresh`, after following the table (a compaction)."""
        return self.sync.places(self.name, lambda: self.store.view_locations(self.plan.name, held).values(), unit.write_id, refresh)

    def record(self, diff: Diff, unit: WriteUnit, committed: Committed | None = None) -> None:
        """The unit's digests into the store, where its rows now live, and the snapshot it made; a
        reload instead when someone else committed to the view meanwhile. A direct commit that
        follows what the store reflects is placed from what it wrote (`StoreSync.place`)."""
        if self.sync.follows(self.name, committed, unit.write_id):
            with self.store.transaction():
                self.store.put_digests(self.plan.name, diff.upserts, diff.deletes, times=diff.times)
                self.sync.place(self.name, committed, unit.write_id)  # type: ignore[arg-type]
                self.caught_up()  # in the same transaction: a crash before it leaves the keys pending
            return
        step = self.sync.advance(self.name, unit.write_id)
        if step is not None:
            with self.store.transaction():
                self.store.put_digests(self.plan.name, diff.upserts, diff.deletes, times=diff.times)
                if self.sync.relocate(self.name, step.moved):
                    self.store.set_record(self.name, self.store.views[self.plan.name].fingerprint, step.current, unit.write_id)
                    self.caught_up()  # in the same transaction: a crash before it leaves the keys pending
                    return
        self.sync.reload(self.name)
        self.caught_up()

    def _hold(self, keys: set[Values] | None = None, now: int = 0, batch_id: int = 0) -> None:
        """A backlog's unit adds `keys` to the pending ones, which the state forgets once maintaining them
        is predicted to cost more than recomputing the view whole (not for a view sized by rows, nor one
        whose rows settle): the view is diffed whole when due, at the backlog's last unit."""
        if keys:
            self.store.defer(self.plan.name, keys, now)
            waiting = 0 if self.by_rows or self.settle is not None else self.store.pending_count(self.plan.name)
            if waiting and self._costs().choose(waiting, lambda: self.store.view_count(self.plan.name), None).plan == WHOLE:
                self.store.forget_pending(self.plan.name)
            crash_point(f"deferred:{self.plan.name}", batch_id)
        if self.budget is None:
            self.catch_up_once()

    def catch_up_once(self) -> None:
        """A view without a budget whose pending keys are left over (its budget was removed) or not known (state
        rebuilt, keys outgrown): due at the first unit (or between batches), whole if not known; then every batch."""
        self.budget, self._once = 0, True

    def in_step(self) -> None:
        """The view was just built whole: nothing of it is pending (and its aggregate states are built by the next unit)."""
        self.store.caught_up(self.plan.name)
        if self.delta is not None:
            self.delta.forget()
        if self._once:
            self.budget, self._once = None, False

    def caught_up(self) -> None:
        """The view shows every change that reached it: nothing of it is pending any more."""
        if self.budget is not None:
            self.store.caught_up(self.plan.name)
        if self._once:
            self.budget, self._once = None, False

    def _evaluate_keys(self, anchor_rows: Mapping[int, list[Values]]) -> set[Values]:
        """Each anchor's keys (a UNION ALL: each branch's): columns and constants found in the driver
        (`lakemv.core.state.walk.direct_keys`), other expressions by Spark over its rows, in one job."""
        found, runs = set[Values](), list[Run]()
        for anchor_id, rows in sorted(anchor_rows.items()):
            part = self.store.mirrors[self.plan.occurrence(anchor_id).table]
            if anchor_id not in self._direct:
                self._direct[anchor_id] = direct_keys(self.plan.keys_at(anchor_id), part, self.key_schema())
            if (direct := self._direct[anchor_id]) is not None:
                found |= project_keys(rows, part, direct)
                continue
            relation = f"{MARK}{self.plan.name}_anchor_{anchor_id}"
            select = ", ".join(f"{over(k.expr, 'a')} AS {q(k.name)}" for k in self.plan.keys_at(anchor_id))
            runs.append((self.kept, f"keys:{anchor_id}", f"SELECT DISTINCT {select} FROM {relation} AS a", {relation: to_arrow(rows, part_schema(part))}))
        if runs:
            found |= {key for ran in run_kept(self.spark, runs) for key in rows_of(ran, self.plan.key_names)}
        return found

    def kept_run(self, gathered: Gathered) -> Run:
        """This view's SQL over the rows it gathered, alone, as its kept plan runs it
        (`lakemv.spark.views.kept.run_kept`); `recomputed` reads its new rows out of the result. By
        delta: the unit's step of its aggregates (`lakemv.spark.views.delta`)."""
        if gathered.signed is not None and self.delta is not None:
            return self.delta.run(gathered.keys, gathered.signed, gathered.writing.unit.write_id)
        inputs: dict[str, pa.Table] = {}
        sources: dict[int, tuple[str, int | None]] = {}
        for occ in self.plan.occurrences:
            relation = f"{MARK}{self.plan.name}_{occ.id}"
            sources[occ.id] = (relation, None)
            inputs[relation] = to_arrow(gathered.rows.get(occ.id, []), part_schema(self.store.mirrors[occ.table]))
        keys, keyed = self.keys_read(gathered), None
        if keys is not None:
            keyed = f"{MARK}{self.plan.name}_keys"
            inputs[keyed] = keys
        return (self.kept, "recompute", self.branch(sources, keyed, 0, 1), inputs)

    @staticmethod
    def recomputed(result: pa.Table) -> pa.Table:
        """The new rows, with their digests, of a run of `kept_run`."""
        return pa.Table.from_struct_array(result.column(1))

    def keys_read(self, gathered: Gathered) -> pa.Table | None:
        """The keys as a relation for the recompute when its anchor's rows are more than the keys' (`branch` joins them)."""
        return None if self.route.exact_keys else to_arrow(gathered.keys, self.key_schema())

    def branch(self, sources: Mapping[int, tuple[str, int | None]], keyed: str | None, index: int, views: int) -> str:
        """This view's part of the batch's recompute (`lakemv.spark.views.together`): its SQL over the
        rows it gathered, each occurrence's read from `sources` (per occurrence: the relation of its
        rows and, in a relation of several, its tag there), as the `index`-th of `views` struct
        columns, with each row's digest; `keyed` names the relation of `keys_read`, if any."""
        ctes = []
        for occ in self.plan.occurrences:
            relation, tag = sources[occ.id]
            columns = ", ".join(q(c) for c in self.store.mirrors[occ.table].column_names)
            read = f"SELECT {columns} FROM {relation}" + (f" WHERE {TAG} = {tag}" if tag is not None else "")
            if occ.id in self.route.anchors and keyed is not None:
                match = " AND ".join(f"k.{q(k.name)} <=> {over(k.expr, 'a')}" for k in self.plan.keys_at(occ.id))
                read = f"SELECT a.* FROM ({read}) AS a LEFT SEMI JOIN {keyed} AS k ON {match}"
            ctes.append(f"{self._prefix}{occ.id} AS ({read})")
        digest = digest_sql(list(self.plan.columns), "b")
        body = final_rows_sql(self._body, self.plan.finality, self.maintainer.watermarks)
        # every field nullable: a struct column is NULL in the other views' rows, and Arrow refuses a
        # NULL struct whose fields are declared not null
        fields = ", ".join(f"{spark_string(c)}, IF(b.{q(c)} IS NULL, NULL, b.{q(c)})" for c in [*self.plan.columns, DIGEST])
        outputs = ", ".join(f"named_struct({fields})" if i == index else "NULL" for i in range(views))
        select = f"SELECT {index} AS {VIEW}, {outputs} FROM (SELECT b.*, {digest} AS {DIGEST} FROM ({body}) AS b) AS b"
        return f"(WITH {', '.join(ctes)} {select})"

    def _states(self, gathered: Gathered, new: pa.Table) -> tuple[pa.Table, list[Values]]:
        """A delta view's new rows and the keys they cover: by delta, the stepped keys' (a key whose
        extreme was retracted recomputed from its group instead); by groups, `new` as it is, the
        states of its keys computed from the same rows when the state keeps them."""
        delta, unit = self.delta, gathered.writing.unit
        assert delta is not None
        if gathered.signed is None:  # recomputed by groups (keys that waited, a backlog's): their states from their rows
            if delta.known(unit.write_id):
                delta.refresh(gathered.keys, gathered.rows, unit.write_id)
            return new, gathered.keys
        rows, keys, redo = delta.split(new, unit.write_id)
        rows = rows.select([*self.plan.columns, DIGEST])
        if redo:  # an extreme was retracted: those groups from their rows, states included
            found = gather(self.plan, self.route, self.store.mirrors, self.store, redo)
            grouped = Gathered(self, redo, found, gathered.choice, gathered.writing)
            again = self.recomputed(run_kept(self.spark, [self.kept_run(grouped)])[0]).select([*self.plan.columns, DIGEST])
            delta.refresh(redo, found, unit.write_id)
            rows, keys = pa.concat_tables([rows, again.cast(rows.schema)]), [*keys, *redo]
        return rows, keys

    def diff_rows(self, new: pa.Table, keys: list[Values], also: Set[Values] = frozenset(), stored: Mapping[Values, str] | None = None) -> Diff:
        """The rows that changed against the stored digests of `keys` (`lakemv.spark.views.rowdiff`)."""
        return diff_rows(self, new, keys, also, stored)
