"""Backfill as write-audit-publish on an Iceberg branch, while ingest keeps running.

1. **Pause** the view's maintenance (lakemv.spark.views.state): batches keep landing mirror changes but leave
   the view alone.
2. **Write** the full recompute, from the mirrors as of their current snapshots, to a branch of the
   view (and of its change feed) made from main: the incremental path with every key, so only the
   rows that differ are written.
3. **Catch up** the branch with the mirror changes that landed meanwhile (snapshot to snapshot).
4. **Audit** the branch: DuckDB recomputes the view from the mirrors at those same snapshots
   (lakemv.duck.verify): every key must match, none missing, extra or duplicated.
5. **Publish** by fast-forwarding main of the view to the branch, and of the feeds table too when
   no batch committed to it meanwhile; otherwise (other views' batches share it) the branch's own
   snapshots are cherry-picked onto its main. Then **resume**: the next batch catches the view up
   from the snapshots the backfill last read, so no change is lost.

A batch already writing the view when the pause began may still commit to main; fast-forward then
refuses (main is no longer an ancestor of the branch) and the backfill starts again from step 2.
"""

from __future__ import annotations

import secrets
import time
from collections import ChainMap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pyspark.sql import SparkSession

from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.tables import TableNames, live_rows_sql
from lakemv.catalog.viewstate import ViewState
from lakemv.core.errors import LakemvError
from lakemv.core.planner import ViewPlan, over
from lakemv.core.planner.finality import checked_sql
from lakemv.core.retry import Retries
from lakemv.duck.verify import VerifyResult, verify_view
from lakemv.spark.commits import WriteUnit, tagged
from lakemv.spark.mirror import ensure_mirror, ensure_namespaces, ensure_view_namespace, event_watermarks
from lakemv.spark.views.maintain import FINGERPRINT, ViewMaintainer
from lakemv.spark.views.state import mirror_snapshots, read_state, ref_snapshot, write_state

STEPS = ("pause", "write", "catch up", "audit", "publish", "resume")


class BackfillError(LakemvError):
    """A backfill could not publish; main was left untouched and maintenance resumed."""


class BackfillAuditFailed(BackfillError):
    """The branch did not match DuckDB's recompute (the branch is kept for inspection)."""


@dataclass(frozen=True)
class BackfillPlan:
    """What a backfill would do (`--dry-run`)."""

    view: str
    branch: str
    table_rows: int
    estimated_rows: int
    mirrors: Mapping[str, tuple[int | None, int]]  # table -> (snapshot, live rows)
    state: ViewState
    downstream: tuple[str, ...] = ()  # the views that read it, rebuilt after it (lakemv.core.planner.dag)

    def lines(self) -> list[str]:
        held = f" (now {self.state.state}" + (f" by {self.state.by})" if self.state.by else ")")
        lines = [
            f"backfill {self.view}{held if self.state.state != 'active' else ''}: "
            f"{self.table_rows:,} rows in the table now, about {self.estimated_rows:,} after the recompute",
            "mirrors read (snapshot, live rows): "
            + ", ".join(f"{t} {s} ({n:,})" for t, (s, n) in self.mirrors.items()),
            f"1. pause maintenance of {self.view} (batches keep landing mirror changes)",
            f"2. write the full recompute to branch {self.branch} of the view and of its change feed",
            "3. catch the branch up with mirror changes that landed meanwhile",
            "4. audit the branch: DuckDB recompute at the same mirror snapshots, key by key",
            "5. publish: fast-forward main to the branch",
            "6. resume maintenance: the next batch catches up from the snapshots the backfill read",
        ]
        if self.downstream:
            lines.append(f"then the same for the views that read it, in dependency order: {', '.join(self.downstream)}")
        return lines


@dataclass(frozen=True)
class BackfillResult:
    """What a backfill did."""

    view: str
    branch: str
    rows: int
    upserts: int
    deletes: int
    catch_ups: int
    caught_up_keys: int
    audit: str
    attempts: int
    seconds: float
    steps: Mapping[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        return (
            f"{self.view}: {self.rows:,} rows; {self.upserts:,} upserted, {self.deletes:,} deleted on branch "
            f"{self.branch}, {self.catch_ups} catch-ups ({self.caught_up_keys:,} keys), audited, published "
            f"({self.seconds:.1f}s)"
        )


class Backfill:
    """Rebuilds one view by write-audit-publish; safe while `maintain` runs (see module docstring)."""

    def __init__(
        self,
        spark: SparkSession,
        settings: LakeSettings,
        sources: Mapping[str, SourceTable],
        plan: ViewPlan,
        *,
        max_catch_ups: int = 5,
        attempts: int = 3,
    ):
        self.spark = spark
        self.settings = settings
        self.sources = ChainMap(sources, {v.name: v for v in plan.inputs})  # (the views it reads, as tables)
        self.plan = plan
        self.names = TableNames(settings.catalog_name)
        self.maintainer = ViewMaintainer(spark, self.names, sources, plan)
        self.maintainer.watermarks = event_watermarks(spark, self.names, sources)
        self.table, self.feed = self.maintainer.table, self.maintainer.feed
        self.max_catch_ups = max_catch_ups
        self.attempts = attempts
        self.id = datetime.now(UTC).strftime("%Y%m%d%H%M%S") + secrets.token_hex(2)
        self.branch = f"lakemv_backfill_{self.id}"
        self.retries = Retries()  # branch commits race compaction's (and ingest's) like any other

    def _ddl(self, sql: str) -> None:
        """An idempotent metadata statement (branches, cherry-picks), retried when it loses a commit race."""
        self.retries.run(sql.split(" BRANCH")[0].split("(")[0].strip(), lambda: self.spark.sql(sql).collect())

    # ---- plan ------------------------------------------------------------------------------------
    def _prepare_tables(self) -> None:
        ensure_namespaces(self.spark, self.names)
        ensure_view_namespace(self.spark, self.names)
        for table in self.plan.tables:
            if table not in self.plan.upstream:
                ensure_mirror(self.spark, self.names, self.sources[table])
        self.maintainer.prepare()

    def dry_run(self) -> BackfillPlan:
        """The plan and the estimated row count (distinct keys of the view's anchor table), writing nothing."""
        self._prepare_tables()
        snapshots = mirror_snapshots(self.spark, self.names, self.plan.tables, self.sources)
        mirrors = {
            t: (snapshots[t], self.spark.sql(f"SELECT count(*) FROM ({live_rows_sql(self.names, self.sources[t])})").first()[0])
            for t in self.plan.tables
        }
        estimate = 0
        for branch in self.plan.anchors:  # a UNION ALL's branches have keys of their own
            anchor = self.plan.occurrence(branch.anchor)
            keys = ", ".join(over(k.expr, "a") for k in branch.keys)
            estimate += self.spark.sql(
                f"SELECT count(*) FROM (SELECT DISTINCT {keys} FROM ({live_rows_sql(self.names, self.sources[anchor.table])}) AS a)"
            ).first()[0]
        rows = self.spark.sql(f"SELECT count(*) FROM {self.table}").first()[0]
        return BackfillPlan(self.plan.name, self.branch, rows, estimate, mirrors, read_state(self.spark, self.table))

    # ---- run -------------------------------------------------------------------------------------
    def run(self, step: Callable[[str, str], None] = lambda name, outcome: None) -> BackfillResult:
        """Write, audit and publish the view; `step` hears each finished step: its name (`STEPS`) and what it did."""
        started = time.perf_counter()
        timings: dict[str, float] = {}
        self._prepare_tables()
        with tagged(self.spark, f"backfill:{self.plan.name}:{self.id}"):
            state = self._pause()
            step("pause", f"paused maintenance of {self.plan.name}")
            for attempt in range(1, self.attempts + 1):
                outcome = self._attempt(state, step, timings)
                if outcome is not None:
                    upserts, deletes, catch_ups, keys, since, audit = outcome
                    break
                step("write", f"main of {self.plan.name} moved (a batch in flight at the pause): starting again")
            else:
                self._resume(state.since)
                raise BackfillError(
                    f"backfill of {self.plan.name}: main kept moving in {self.attempts} attempts; maintenance resumed"
                )
            clock = time.perf_counter()
            self._resume(since)
            self._drop_branches()
            timings["resume"] = time.perf_counter() - clock
            step("resume", "resumed maintenance")
        return BackfillResult(
            view=self.plan.name,
            branch=self.branch,
            rows=audit.table_rows,
            upserts=upserts,
            deletes=deletes,
            catch_ups=catch_ups,
            caught_up_keys=keys,
            audit=audit.summary(),
            attempts=attempt,
            seconds=time.perf_counter() - started,
            steps={k: round(v, 2) for k, v in timings.items()},
        )

    def _pause(self) -> ViewState:
        """Pause maintenance (or take over an interrupted backfill, keeping its older snapshots)."""
        current = read_state(self.spark, self.table)
        if current.state == "paused":  # an interrupted backfill: its branch goes, its snapshots stay
            since = dict(current.since)
            if current.branch:
                self._drop_branches(current.branch)
        elif current.state == "resume":
            since = dict(current.since)  # a published backfill not yet caught up: start from there
        else:
            since = mirror_snapshots(self.spark, self.names, self.plan.tables, self.sources)
        state = ViewState("paused", since, by=f"backfill {self.id}", branch=self.branch)
        write_state(self.spark, self.table, state)
        return state

    def _attempt(self, state: ViewState, step: Callable[[str, str], None], timings: dict[str, float]):  # noqa: ANN202
        """Steps 2-5 on a fresh branch; None when main moved under the branch (start again)."""
        clock = time.perf_counter()
        for table in (self.table, self.feed):
            self._ddl(f"ALTER TABLE {table} CREATE OR REPLACE BRANCH {self.branch}")
        snapshots = mirror_snapshots(self.spark, self.names, self.plan.tables, self.sources)
        unit = WriteUnit(f"backfill:{self.plan.name}:{self.id}")
        written = self.maintainer.at(snapshots, self.branch).write_all(unit)
        timings["write"] = time.perf_counter() - clock
        step("write", f"wrote the recompute to branch {self.branch}: {written.upserts:,} upserts, {written.deletes:,} deletes")

        clock, catch_ups, keys = time.perf_counter(), 0, 0
        for _ in range(self.max_catch_ups):
            now = mirror_snapshots(self.spark, self.names, self.plan.tables, self.sources)
            if now == snapshots:
                break
            caught = self.maintainer.at(now, self.branch).catch_up(snapshots, now, unit)
            catch_ups, keys, snapshots = catch_ups + 1, keys + (caught.keys or 0), now
        timings["catch up"] = time.perf_counter() - clock
        step("catch up", f"caught up: {catch_ups} rounds, {keys:,} keys")

        clock = time.perf_counter()
        audit = self._audit(snapshots)
        timings["audit"] = time.perf_counter() - clock
        if not audit.ok:
            self._resume(state.since)
            raise BackfillAuditFailed(
                f"audit of {self.plan.name} failed, main untouched, branch {self.branch} kept for inspection: "
                f"{audit.summary()}"
            )
        step("audit", f"audited: {audit.matching:,} rows match DuckDB's recompute")

        clock = time.perf_counter()
        if not self._fast_forward(self.table):
            return None
        write_state(self.spark, self.table, ViewState("paused", snapshots, by=state.by, branch=self.branch, published=True))
        if not self._fast_forward(self.feed):
            self._cherry_pick(self.feed)
        fingerprint = self.plan.fingerprint
        self.spark.sql(f"ALTER TABLE {self.table} SET TBLPROPERTIES ('{FINGERPRINT}'='{fingerprint}')")
        timings["publish"] = time.perf_counter() - clock
        step("publish", f"published: main of {self.plan.name} fast-forwarded to {self.branch}")
        return written.upserts, written.deletes, catch_ups, keys, snapshots, audit

    def _audit(self, snapshots: Mapping[str, int | None]) -> VerifyResult:
        return verify_view(
            self.settings,
            self.sources,
            self.plan.name,
            checked_sql(self.plan.definition.sql, self.plan.finality, self.sources),
            self.plan.key_names,
            table_snapshot=ref_snapshot(self.spark, self.table, self.branch),
            mirror_snapshots=snapshots,
            compare=self.plan.compared,
        )

    # ---- Iceberg refs ----------------------------------------------------------------------------
    def _identifier(self, table: str) -> str:
        return table.split(".", 1)[1]  # the procedure's table argument: namespace.name

    def _fast_forward(self, table: str) -> bool:
        """Fast-forward main to the branch; False when main is no longer an ancestor of it."""
        try:
            self._ddl(
                f"CALL {self.settings.catalog_name}.system.fast_forward(table => '{self._identifier(table)}', "
                f"branch => 'main', to => '{self.branch}')"
            )
        except Exception as exc:
            if "is not an ancestor" in str(exc):
                return False
            raise
        return True

    def _cherry_pick(self, table: str) -> None:
        """Apply the branch's own snapshots (those main has not got) onto main, oldest first.

        The branch's base is where its history meets main's: read from the refs at this point, not
        remembered from the branch's creation, which an ingest commit to main can race.
        """
        parents = dict(
            (r["snapshot_id"], r["parent_id"]) for r in self.spark.sql(f"SELECT snapshot_id, parent_id FROM {table}.snapshots").collect()
        )
        on_main, snapshot = set(), ref_snapshot(self.spark, table)
        while snapshot is not None:
            on_main.add(snapshot)
            snapshot = parents.get(snapshot)
        chain, snapshot = [], ref_snapshot(self.spark, table, self.branch)
        while snapshot is not None and snapshot not in on_main:
            chain.append(snapshot)
            snapshot = parents.get(snapshot)
        for snapshot in reversed(chain):
            self.spark.sql(
                f"CALL {self.settings.catalog_name}.system.cherrypick_snapshot(table => '{self._identifier(table)}', "
                f"snapshot_id => {snapshot})"
            ).collect()

    def _resume(self, since: Mapping[str, int | None]) -> None:
        write_state(self.spark, self.table, ViewState("resume", since, by=f"backfill {self.id}"))

    def _drop_branches(self, branch: str | None = None) -> None:
        for table in (self.table, self.feed):
            self._ddl(f"ALTER TABLE {table} DROP BRANCH IF EXISTS {branch or self.branch}")
