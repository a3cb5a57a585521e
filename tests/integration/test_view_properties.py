"""Views under random CDC histories: after every batch each view table equals its full recompute.

A hypothesis strategy draws a history over the five source tables on a deliberately tiny domain (3
emails, 4 usernames, 3 owners x 2 repo names, ids 1..3), so joins hit and keys collide: creates,
updates of join columns (with and without a before-image), full and key-only deletes, deletes of
missing keys, users deleted and re-created, and verbatim replays of earlier lines. The history is
split into 1-4 batches; after each batch, for both views:

* view table == lakemv's own full recompute (`ViewMaintainer.recompute`);
* view table == the user's SQL run verbatim over temp views holding the live mirror rows;
* view table == `tests.viewmodel` (plain Python, no Spark) over the test's own model of the history;
* the change feed rows of the batch are exactly the view rows that changed (upserts) or vanished
  (deletes), nothing else;
* the live mirror rows equal an independent model of the history (replays have no effect).

Hypothesis budget: 4 examples in `make test` (about 20 s each: a fresh catalog, then 1-4 batches, each
checked; the simplest history first), more with `LAKEMV_VIEW_EXAMPLES=30`.
The strategy biases towards changes that reach view rows through joins; a deterministic test covers
every such link once, in one batch, each on rows no other change reaches. Two more pin down the
fan-out of one repo edit to several profiles, and that a batch that changes nothing visible (replays;
columns no view reads) writes no snapshot and no change-feed row.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_basic_rows_equality, assert_df_equality
from chispa.schema_comparer import assert_schema_equality
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st
from pyspark.sql import Row

from lakemv.catalog.declarations import SourceRegistry
from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.tables import TableNames, live_rows_sql
from lakemv.core.planner import ViewPlan, plan_view
from lakemv.core.planner.definitions import load_views
from lakemv.core.state.store import Store
from lakemv.spark.batch.runner import BatchProcessor
from lakemv.spark.directwrite import DirectWriter
from lakemv.spark.views.maintain import ViewMaintainer
from tests import viewmodel
from tests.cdc import at, dbz
from tests.conftest import small_settings

# ---- the small domain -------------------------------------------------------------------------------
EMAILS = ("a@x.io", "b@x.io", "c@x.io")
USERNAMES = ("ann", "bob", "cy", "dee")
OWNERS = ("ann", "bob", "cy")
REPO_NAMES = ("lake", "pond")
IDS = (1, 2, 3)
PR_INDEXES = (1, 2)
T_MICROS = 1_709_294_400_000_000  # 2024-03-01T12:00:00Z
T_MILLIS = T_MICROS // 1000
# Two spellings of the same instant: an update between them changes nothing any view can see.
PR_TIMES = ("2024-03-01T12:00:00Z", "2024-03-01T13:00:00+01:00", "2024-03-02T08:30:00.123456+00:00", None)

TABLES = ("users", "repos", "pull_requests", "stars", "payment_info")
PRIMARY_KEYS = {
    "users": ("email",),
    "repos": ("owner", "name"),
    "pull_requests": ("repo", "repo_owner", "index"),
    "stars": ("username", "repo_name", "repo_owner"),
    "payment_info": ("id",),
}
KEY_DOMAIN: dict[str, list[tuple[Any, ...]]] = {
    "users": [(e,) for e in EMAILS],
    "repos": [(o, n) for o in OWNERS for n in REPO_NAMES],
    "pull_requests": [(n, o, i) for o in OWNERS for n in REPO_NAMES for i in PR_INDEXES],
    "stars": [(u, n, o) for u in USERNAMES for o in OWNERS for n in REPO_NAMES],
    "payment_info": [(i,) for i in IDS],
}
VALUES: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "users": {
        "username": st.sampled_from(USERNAMES),
        "id": st.sampled_from(IDS),
        "registered_at": st.sampled_from([T_MICROS, T_MICROS + 1, None]),
    },
    "repos": {
        "description": st.sampled_from(["lakes", "ponds", "rivers", None]),
        "star_count": st.integers(0, 3),
        "fork_count": st.integers(0, 2),
        "created_at": st.sampled_from([T_MILLIS, T_MILLIS + 1]),
        "updated_at": st.sampled_from([None, T_MILLIS + 2]),
    },
    "pull_requests": {
        "title": st.sampled_from(["fix", "feat", None]),
        "author": st.sampled_from((*USERNAMES, None)),
        "status": st.sampled_from(["open", "closed", "merged", None]),
        "created_at": st.sampled_from(PR_TIMES),
    },
    "stars": {"created_at": st.sampled_from([T_MICROS, T_MICROS + 5])},
    "payment_info": {"user_id": st.sampled_from((*IDS, None)), "verified": st.sampled_from([True, False, True, None])},
}
# Timestamp columns and their wire encoding (the model turns them into epoch micros itself).
TIMESTAMPS = {
    ("users", "registered_at"): "micros",
    ("repos", "created_at"): "millis",
    ("repos", "updated_at"): "millis",
    ("pull_requests", "created_at"): "iso",
    ("stars", "created_at"): "micros",
}
COLUMNS = {t: (*PRIMARY_KEYS[t], *VALUES[t]) for t in TABLES}
# Non-key columns the views read (the columns updates mostly change).
SEEN = {
    "users": ["username", "id"],
    "repos": ["description"],
    "pull_requests": ["author", "status", "title", "created_at"],
    "stars": ["created_at"],  # no view reads it: a star update is invisible
    "payment_info": ["user_id", "verified"],
}
# Tables a change picks from: the two whose changes reach few view rows come up twice as often.
CHANGED_TABLES = ("users", "repos", "pull_requests", "stars", "payment_info", "stars", "payment_info")
MODELS = {"user_profile": viewmodel.user_profile, "repo_summary": viewmodel.repo_summary}


@dataclass(frozen=True)
class Event:
    """One line of the history: a Debezium envelope for `table`; `replay_of` marks a verbatim re-send."""

    table: str
    op: str
    lsn: int
    key: tuple[Any, ...]
    after: dict[str, Any] | None
    line: str
    replay_of: int | None = None

    def describe(self, index: int) -> str:
        what = f"REPLAY of #{self.replay_of}" if self.replay_of is not None else ""
        return f"#{index} {self.table} {self.op} lsn={self.lsn} {what} {self.line}"


@dataclass
class History:
    events: list[Event]
    cuts: list[int] = field(default_factory=list)  # batch boundaries (indexes into events)

    @property
    def batches(self) -> list[list[Event]]:
        bounds = [0, *self.cuts, len(self.events)]
        return [self.events[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # how hypothesis shows a failing example
        printer.text(f"<History of {len(self.events)} events in {len(self.batches)} batches, listed below>")

    def describe(self) -> str:
        lines, index = [], 0
        for number, batch in enumerate(self.batches):
            lines.append(f"--- batch {number}")
            for event in batch:
                lines.append(event.describe(index))
                index += 1
        return "\n".join(lines)


def _row(table: str, key: tuple[Any, ...], values: dict[str, Any]) -> dict[str, Any]:
    return {**dict(zip(PRIMARY_KEYS[table], key, strict=True)), **values}


Image = dict[str, Any]  # a row image as Debezium sends it
Database = dict[str, dict[tuple[Any, ...], Image]]


def _related(draw: st.DrawFn, found: list[Any]) -> Any | None:
    """Mostly one of `found` (values the other tables hold, so joins hit), else None (draw freely)."""
    return draw(st.sampled_from(found)) if found and draw(st.integers(0, 3)) > 0 else None


def _draw_key(draw: st.DrawFn, table: str, db: Database) -> tuple[Any, ...]:
    """A primary key for a new row; stars and pull requests mostly on live repos and users."""
    repos = sorted(db["repos"])
    if table == "stars":
        usernames = sorted({u["username"] for u in db["users"].values()})
        username, repo = _related(draw, usernames), _related(draw, repos)
        if username is not None and repo is not None:
            return (username, repo[1], repo[0])
    if table == "pull_requests" and (repo := _related(draw, repos)) is not None:
        return (repo[1], repo[0], draw(st.sampled_from(PR_INDEXES)))
    return draw(st.sampled_from(KEY_DOMAIN[table]))


def _draw_live_key(draw: st.DrawFn, table: str, db: Database) -> tuple[Any, ...]:
    """The key of a live row, mostly one that other rows join to (a starred repo, a user with stars...)."""
    usernames = {u["username"] for u in db["users"].values()}
    ids = {u["id"] for u in db["users"].values()}
    stars, prs, payments = db["stars"].values(), db["pull_requests"].values(), db["payment_info"].values()
    linked = {
        "users": [
            (u["email"],)
            for u in db["users"].values()
            if u["username"] in {s["username"] for s in stars} | {p["author"] for p in prs}
            or u["id"] in {p["user_id"] for p in payments}
        ],
        "repos": [
            k
            for k in db["repos"]
            if k in {(s["repo_owner"], s["repo_name"]) for s in stars} | {(p["repo_owner"], p["repo"]) for p in prs}
        ],
        "pull_requests": [k for k, p in db["pull_requests"].items() if p["author"] in usernames],
        "stars": [k for k, s in db["stars"].items() if s["username"] in usernames],
        "payment_info": [k for k, p in db["payment_info"].items() if p["user_id"] in ids],
    }[table]
    key = _related(draw, sorted(linked, key=repr))
    return draw(st.sampled_from(sorted(db[table], key=repr))) if key is None else key


_ANY = object()


def _draw_value(draw: st.DrawFn, table: str, column: str, db: Database, avoid: Any = _ANY) -> Any:
    """A column value; join columns mostly take a value that matches some row of the joined table.
    Never `avoid` (the current value, for an update that must change something)."""
    users = db["users"].values()
    found: list[Any] = []
    if (table, column) == ("pull_requests", "author"):
        found = sorted({u["username"] for u in users})
    elif (table, column) == ("payment_info", "user_id"):
        found = sorted({u["id"] for u in users})
    elif (table, column) == ("users", "username"):
        authors = {p["author"] for p in db["pull_requests"].values() if p["author"]}
        found = sorted({s["username"] for s in db["stars"].values()} | authors)
    elif (table, column) == ("users", "id"):
        found = sorted({p["user_id"] for p in db["payment_info"].values() if p["user_id"] is not None})
    value = _related(draw, [v for v in found if v != avoid])
    return draw(VALUES[table][column].filter(lambda v: v != avoid)) if value is None else value


SNAPSHOT_SIZES = {"users": (1, 3), "repos": (1, 4), "pull_requests": (0, 4), "stars": (0, 6), "payment_info": (0, 3)}


@st.composite
def histories(draw: st.DrawFn, unique_usernames: bool = False, later_batches: int = 3) -> History:
    """A random, internally consistent CDC history in 1 to 1 + `later_batches` batches.

    Batch 0 is a snapshot of a small random database (users, repos, then pull requests, stars and
    payments pointing at them, so joins hit) plus a few changes. Later batches hold 1-5 changes each:
    mostly updates of the columns views read, deletes, (re-)creates and verbatim replays; a later batch
    is sometimes made of replays only (every change stale). Small batches matter: a view key lakemv
    fails to recompute is not masked by another change touching the same key. With
    `unique_usernames`, no two live users share a username (as `users` declares it unique).
    """
    db: Database = {t: {} for t in TABLES}
    events: list[Event] = []
    lsn = 100

    def emit(table: str, op: str, key: tuple[Any, ...], after: Image | None, before: Image | None) -> None:
        nonlocal lsn
        lsn += draw(st.integers(1, 3))
        line = dbz(op, lsn, after=after, before=before, wrapped=draw(st.booleans()))
        events.append(Event(table, op, lsn, key, after, line))

    def unique(table: str, key: tuple[Any, ...], after: Image) -> Image:
        taken = {u["username"] for k, u in db["users"].items() if k != key}
        if unique_usernames and table == "users" and after["username"] in taken:
            return {**after, "username": draw(st.sampled_from([n for n in USERNAMES if n not in taken]))}
        return after

    def create(table: str, key: tuple[Any, ...], op: str) -> None:
        after = unique(table, key, _row(table, key, {c: _draw_value(draw, table, c, db) for c in VALUES[table]}))
        db[table][key] = after
        emit(table, op, key, after, None)

    def change(later: bool) -> None:
        kind = draw(st.sampled_from(["upsert", "upsert", "upsert", "delete", "replay"]))
        if kind == "replay" and events:
            replay()
            return
        table = draw(st.sampled_from(CHANGED_TABLES))
        live = db[table]
        if kind == "delete":
            if live and draw(st.integers(0, 4)) > 0:
                key = _draw_live_key(draw, table, db)
            else:
                key = draw(st.sampled_from(KEY_DOMAIN[table]))  # may well not exist
            current = live.pop(key, None)
            key_only = current is None or draw(st.booleans())
            emit(table, "d", key, None, _row(table, key, {}) if key_only else current)
            return
        # Mostly an existing row in later batches; rarely for stars, as no view reads a star's columns.
        if live and draw(st.integers(0, 3)) >= (3 if table == "stars" else 1 if later else 2):
            key = _draw_live_key(draw, table, db)
        else:
            key = _draw_key(draw, table, db)  # after a delete of the same key: a re-create
        current = live.get(key)
        if current is None:
            create(table, key, draw(st.sampled_from(["c", "c", "r"])))
            return
        # An update mostly changes the value of one column a view reads, else of any one or two
        # (possibly to the same value: a touch); half of them carry no before-image.
        if draw(st.integers(0, 2)) > 0:
            column = draw(st.sampled_from(SEEN[table]))
            after = {**current, column: _draw_value(draw, table, column, db, avoid=current[column])}
        else:
            changed = draw(st.lists(st.sampled_from(list(VALUES[table])), min_size=1, max_size=2, unique=True))
            after = {**current, **{c: _draw_value(draw, table, c, db) for c in changed}}
        live[key] = after = unique(table, key, after)
        emit(table, "u", key, after, None if draw(st.booleans()) else current)

    def replay() -> None:
        index = draw(st.integers(0, len(events) - 1))
        was = events[index]
        events.append(Event(was.table, was.op, was.lsn, was.key, was.after, was.line, index))

    for table in TABLES:
        low, high = SNAPSHOT_SIZES[table]
        for _ in range(draw(st.integers(low, high), label=f"snapshot {table}")):
            if table in ("stars", "pull_requests"):
                key = _draw_key(draw, table, db)  # on live users and repos
            else:
                key = draw(st.sampled_from([k for k in KEY_DOMAIN[table] if k not in db[table]]))
            if key not in db[table]:
                create(table, key, "r")
    for _ in range(draw(st.integers(0, 4), label="changes in batch 0")):
        change(later=False)
    cuts = []
    for _ in range(draw(st.sampled_from([min(n, later_batches) for n in (0, 1, 2, 3, 3, 3)]), label="later batches")):
        cuts.append(len(events))
        replays_only = bool(events) and draw(st.integers(0, 4)) == 0
        for _ in range(draw(st.integers(1, 5), label="batch size")):
            replay() if replays_only else change(later=True)
    cuts = [c for c in cuts if 0 < c < len(events)]
    return History(events, sorted(set(cuts)))


# ---- an independent model of the mirrors ------------------------------------------------------------
def _micros(table: str, column: str, value: Any) -> Any:
    encoding = TIMESTAMPS.get((table, column))
    if value is None or encoding is None:
        return value
    if encoding == "millis":
        return value * 1000
    if encoding == "iso":
        return (datetime.fromisoformat(value) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    return value


def model_state(events: list[Event]) -> dict[str, dict[tuple[Any, ...], dict[str, Any]]]:
    """Live rows per table and key after `events`: the newest non-replayed event per key wins, a delete
    removes. Timestamps as epoch micros (the representation `tests.viewmodel` works on)."""
    latest: dict[str, dict[tuple[Any, ...], dict[str, Any] | None]] = {t: {} for t in TABLES}
    for event in events:
        if event.replay_of is None:
            latest[event.table][event.key] = event.after
    return {
        t: {k: {c: _micros(t, c, row[c]) for c in COLUMNS[t]} for k, row in rows.items() if row is not None}
        for t, rows in latest.items()
    }


def _plain(value: Any) -> Any:
    """A collected Spark value in `tests.viewmodel`'s terms: dicts, lists, timestamps as epoch micros."""
    if isinstance(value, Row):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):  # naive local time from PySpark; astimezone reads it as such
        return (value.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    return value


def mirror_rows(lake: Lake, table: str) -> list[tuple[Any, ...]]:
    select = ", ".join(
        f"unix_micros(`{c}`) AS `{c}`" if (table, c) in TIMESTAMPS else f"`{c}`" for c in COLUMNS[table]
    )
    frame = lake.spark.sql(f"SELECT {select} FROM ({live_rows_sql(lake.names, lake.sources[table])})")
    return sorted((tuple(r) for r in frame.collect()), key=repr)


# ---- a fresh lake per example ---------------------------------------------------------------------
@dataclass
class Lake:
    spark: Any
    settings: LakeSettings
    sources: SourceRegistry

    @property
    def names(self) -> TableNames:
        return TableNames(self.settings.catalog_name)


def fresh_lake(spark: Any, root: Path, sources: SourceRegistry) -> Lake:
    """A new catalog + warehouse on the shared session (the `lake` fixture is per test, not per example)."""
    from lakemv.spark.session import use_catalog

    name = f"t_{uuid.uuid4().hex[:10]}"
    lake_settings = small_settings(root / name, name)
    use_catalog(spark, lake_settings)
    return Lake(spark, lake_settings, sources)


def view_plans(lake: Lake) -> list[ViewPlan]:
    return [plan_view(v, lake.sources) for v in load_views(LakeSettings().view_dirs).values()]


@contextmanager
def source_temp_views(lake: Lake) -> Iterator[None]:
    """The live mirror rows registered under the plain source names the view SQL reads."""
    for table in TABLES:
        lake.spark.sql(live_rows_sql(lake.names, lake.sources[table])).createOrReplaceTempView(table)
    try:
        yield
    finally:
        for table in TABLES:
            lake.spark.catalog.dropTempView(table)


ViewRows = dict[tuple[Any, ...], Row]  # a view's rows by key


def view_state(lake: Lake, maintainer: ViewMaintainer) -> ViewRows:
    """The view table's rows by key."""
    rows = lake.spark.table(maintainer.table).select(*maintainer.plan.columns).collect()
    state = {tuple(r[k] for k in maintainer.plan.key_names): r for r in rows}
    assert len(state) == len(rows), f"{maintainer.plan.name}: duplicate keys in the view table"
    return state


def _nulls_first(key: tuple[Any, ...]) -> tuple[tuple[bool, Any], ...]:
    """A sort key for view keys that may hold NULL (a GROUP BY's NULL group)."""
    return tuple((value is not None, value) for value in key)


def assert_views_are_fresh(lake: Lake, processor: BatchProcessor, recompute: bool = True) -> dict[str, ViewRows]:
    """Each view table equals lakemv's full recompute and the verbatim SQL over the live mirrors (the
    verbatim SQL only without `recompute`: the two agree over the same mirrors whichever way a batch
    maintained the views, so a test that runs the same batches several ways compares them once).

    What chispa's `assert_df_equality(..., ignore_row_order=True, ignore_nullable=True)` checks, with
    each side collected once and ordered by the view key in Python (half the Spark jobs: this runs
    after every batch of every example). Returns the view tables' rows by key.
    """
    states = {}
    with source_temp_views(lake):
        for m in processor.maintainers:
            table = lake.spark.table(m.table).select(*m.plan.columns)
            state = view_state(lake, m)
            actual = [state[k] for k in sorted(state, key=_nulls_first)]
            for expected in ((m.recompute(),) if recompute else ()) + (lake.spark.sql(m.plan.definition.sql),):
                assert_schema_equality(table.schema, expected.schema, ignore_nullable=True)
                want = sorted(expected.collect(), key=lambda r: _nulls_first(tuple(r[k] for k in m.plan.key_names)))
                assert_basic_rows_equality(actual, want, underline_cells=True)
            states[m.plan.name] = state
    return states


def assert_views_equal_recomputes(lake: Lake, processor: BatchProcessor) -> None:
    """The same check as `assert_views_are_fresh`, DataFrame against DataFrame with chispa."""
    with source_temp_views(lake):
        for m in processor.maintainers:
            for expected in (m.recompute(), lake.spark.sql(m.plan.definition.sql)):
                actual = lake.spark.table(m.table).select(*expected.columns)
                assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


def assert_feed_is_the_diff(
    lake: Lake, maintainer: ViewMaintainer, batch_id: int, before: ViewRows, after: ViewRows
) -> None:
    """The change feed rows of `batch_id` are exactly the view rows that changed or vanished."""
    keys = maintainer.plan.key_names
    feed = lake.spark.table(lake.names.view_changes(maintainer.plan.name)).where(f"batch_id = {batch_id}").collect()
    got: dict[tuple[Any, ...], tuple[str, Any]] = {}
    for r in feed:
        key = tuple(r[k] for k in keys)
        assert key not in got, f"{maintainer.plan.name}: key {key} twice in the feed of batch {batch_id}"
        got[key] = (r["op"], r["row"])
    expected = {k: ("upsert", row) for k, row in after.items() if before.get(k) != row}
    expected.update({k: ("delete", None) for k in before.keys() - after.keys()})
    assert got == expected, f"{maintainer.plan.name}: change feed of batch {batch_id}"


# ---- the property -----------------------------------------------------------------------------------
def examples(count: int) -> settings:
    """Hypothesis settings of the property tests: `count` examples of a slow, fixture-using test.

    A failing example is reported as found (a history of a few batches, reproducible from the printed
    blob), not shrunk: one example costs a minute or more, and shrinking one took 14 minutes in CI.
    LAKEMV_SHRINK=1 shrinks it."""
    phases = [p for p in Phase if p is not Phase.shrink or os.environ.get("LAKEMV_SHRINK")]
    return settings(max_examples=count, deadline=None, print_blob=True, phases=phases,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip


@pytest.mark.slow(135)
@examples(int(os.environ.get("LAKEMV_VIEW_EXAMPLES", "3")))
@given(history=histories(), mode=st.sampled_from(["scan", "indexed", "direct"]))
def test_views_equal_their_full_recompute_after_every_batch(spark, tmp_path, sources, history, mode):
    note(history.describe() + f"\nlookups and writes: {mode}")
    lake = fresh_lake(spark, tmp_path, sources)
    store = Store(lake.settings.local_root / "state.sqlite") if mode != "scan" else None
    run_history(lake, history, store, DirectWriter(spark, lake.settings) if mode == "direct" else None)


def run_history(lake: Lake, history: History, store: Store | None = None, direct: DirectWriter | None = None) -> None:
    """Feed `history` batch by batch; after each: mirrors == model, views fresh, feeds == diffs."""
    processor = BatchProcessor(lake.spark, lake.names, lake.sources, view_plans(lake), store=store, direct=direct)
    assert set(processor.indexed) == ({m.plan.name for m in processor.maintainers} if store else set())
    views = assert_views_are_fresh(lake, processor)
    applied: list[Event] = []
    for batch_id, batch in enumerate(history.batches):
        processor.process_lines(batch_id, [(e.line, at(e.table, f"b{batch_id}.json")) for e in batch])
        applied += batch
        state = model_state(applied)
        for table in TABLES:
            expected = sorted((tuple(r[c] for c in COLUMNS[table]) for r in state[table].values()), key=repr)
            assert mirror_rows(lake, table) == expected, f"mirror {table} after batch {batch_id}"
        fresh = assert_views_are_fresh(lake, processor)
        for m in processor.maintainers:
            now = fresh[m.plan.name]
            model = {tuple(r[k] for k in m.plan.key_names): r for r in MODELS[m.plan.name](state)}
            assert {k: _plain(r) for k, r in now.items()} == model, f"{m.plan.name} != viewmodel, batch {batch_id}"
            assert_feed_is_the_diff(lake, m, batch_id, views[m.plan.name], now)
            views[m.plan.name] = now


# ---- deterministic tests ----------------------------------------------------------------------------
def _user(email: str, username: str, id: int) -> dict[str, Any]:  # noqa: A002
    return {"id": id, "email": email, "username": username, "registered_at": T_MICROS}


def _repo(owner: str, name: str, description: str | None) -> dict[str, Any]:
    return {"name": name, "owner": owner, "description": description, "star_count": 3, "fork_count": 0,
            "created_at": T_MILLIS, "updated_at": None}  # fmt: skip


def _star(username: str, owner: str, name: str) -> dict[str, Any]:
    return {"username": username, "repo_name": name, "repo_owner": owner, "created_at": T_MICROS}


def _snapshots(lake: Lake, table: str) -> list[int]:
    return sorted(r[0] for r in lake.spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect())


def _starred(row) -> list[tuple[str, str, str | None]]:
    return [(s["repo_owner"], s["repo_name"], s["description"]) for s in row["starred_repos"]]


def test_one_repo_edit_fans_out_to_every_profile_that_starred_it(lake):
    processor = BatchProcessor(lake.spark, lake.names, lake.sources, view_plans(lake))
    fans = [("a@x.io", "ann", 1), ("b@x.io", "bob", 2), ("c@x.io", "cy", 3)]
    lines = [dbz("c", 1 + n, _user(*fan)) for n, fan in enumerate(fans)]
    lines.append(dbz("c", 4, _user("d@x.io", "dee", 4)))
    lines.append(dbz("c", 5, _repo("ann", "lake", "old words")))
    lines.append(dbz("c", 6, _repo("bob", "pond", "other")))
    stars = [dbz("c", 7 + n, _star(username, "ann", "lake")) for n, (_, username, _) in enumerate(fans)]
    stars.append(dbz("c", 10, _star("dee", "bob", "pond")))
    processor.process_lines(
        0,
        [(line, at("users")) for line in lines[:4]]
        + [(line, at("repos")) for line in lines[4:]]
        + [(line, at("stars")) for line in stars],
    )
    profiles = lake.names.view("user_profile")
    before = {r["email"]: r for r in lake.spark.table(profiles).collect()}
    assert {e: _starred(r) for e, r in before.items()} == {
        "a@x.io": [("ann", "lake", "old words")],
        "b@x.io": [("ann", "lake", "old words")],
        "c@x.io": [("ann", "lake", "old words")],
        "d@x.io": [("bob", "pond", "other")],
    }

    result = processor.process_lines(1, [(dbz("u", 20, _repo("ann", "lake", "new words")), at("repos"))])
    assert result.views["user_profile"].upserts == 3
    after = {r["email"]: r for r in lake.spark.table(profiles).collect()}
    for email, *_ in fans:
        assert _starred(after[email]) == [("ann", "lake", "new words")]
        assert after[email]["pull_requests"] == before[email]["pull_requests"]
    assert after["d@x.io"] == before["d@x.io"]

    feed = lake.spark.table(lake.names.view_changes("user_profile")).where("batch_id = 1").collect()
    assert sorted(r["email"] for r in feed) == ["a@x.io", "b@x.io", "c@x.io"]
    assert {r["op"] for r in feed} == {"upsert"}
    assert {r["source_position"] for r in feed} == {20}
    assert all(r["row"] == after[r["email"]] for r in feed)

    summary = {(r["owner"], r["name"]): r for r in lake.spark.table(lake.names.view("repo_summary")).collect()}
    assert summary[("ann", "lake")]["description"] == "new words"
    assert summary[("ann", "lake")]["stars"] == 3
    assert summary[("ann", "lake")]["owner_email"] == "a@x.io"
    assert summary[("bob", "pond")]["description"] == "other"
    summary_feed = lake.spark.table(lake.names.view_changes("repo_summary")).where("batch_id = 1").collect()
    assert [(r["owner"], r["name"], r["op"]) for r in summary_feed] == [("ann", "lake", "upsert")]
    assert_views_equal_recomputes(lake, processor)


def _event(table: str, op: str, lsn: int, after: Image | None = None, before: Image | None = None) -> Event:
    image = after if after is not None else before
    key = tuple(image[k] for k in PRIMARY_KEYS[table])
    return Event(table, op, lsn, key, None if op == "d" else after, dbz(op, lsn, after=after, before=before))


@pytest.mark.parametrize("indexed", [False, True], ids=["scan", "indexed"])
def test_one_change_per_link_each_reaching_its_own_view_rows(lake, tmp_path, indexed):
    """Every way a change reaches a view row, once, in one batch, each on view rows no other change reaches
    (so a link lakemv forgets cannot be covered up by another): the same checks as the property."""
    users = {n: {"email": f"{n}@x.io", "username": n, "id": i, "registered_at": T_MICROS}
             for i, n in enumerate(["ann", "bob", "cy", "dee", "eve", "fay", "gus", "hal"], start=1)}  # fmt: skip
    repos = {(o, n): _repo(o, n, d) for o, n, d in
             [("ann", "lake", "a"), ("anna", "pond", "b"), ("cy", "lake", "c"), ("dee", "pond", "old"),
              ("eve", "sea", "e"), ("ivy", "hill", "i")]}  # fmt: skip
    pr1 = {"title": "t", "repo": "sea", "repo_owner": "eve", "index": 1, "author": "dee", "status": "open",
           "created_at": "2024-03-01T12:00:00Z"}  # fmt: skip
    pr2 = {**pr1, "repo": "hill", "repo_owner": "ivy", "author": "zoe"}  # zoe is nobody's username
    pay1, pay2 = {"id": 1, "user_id": 6, "verified": False}, {"id": 2, "user_id": 7, "verified": True}
    setup = [_event("users", "r", 10 + n, u) for n, u in enumerate(users.values())]
    setup += [_event("repos", "r", 20 + n, r) for n, r in enumerate(repos.values())]
    setup += [
        _event("stars", "r", 30, _star("cy", "dee", "pond")),
        _event("pull_requests", "r", 31, pr1),
        _event("pull_requests", "r", 32, pr2),
        _event("payment_info", "r", 33, pay1),
        _event("payment_info", "r", 34, pay2),
    ]
    changes = [
        # user_profile <- users (the anchor), repo_summary <- users (owner_email: ann/lake loses, anna/pond gains)
        _event("users", "u", 40, {**users["ann"], "username": "anna"}),
        # user_profile <- stars (bob), repo_summary <- stars (cy/lake's count)
        _event("stars", "c", 41, _star("bob", "cy", "lake")),
        # user_profile <- repos through stars (cy), repo_summary <- repos (the anchor)
        _event("repos", "u", 42, repos[("dee", "pond")] | {"description": "new"}, before=repos[("dee", "pond")]),
        # user_profile <- pull_requests (dee loses, eve gains), repo_summary <- pull_requests (contributors)
        _event("pull_requests", "u", 43, {**pr1, "author": "eve"}),
        # repo_summary <- pull_requests (open count), no profile involved
        _event("pull_requests", "u", 44, {**pr2, "status": "closed"}, before=pr2),
        # user_profile <- payment_info (fay verified; gus loses it to hal)
        _event("payment_info", "u", 45, {**pay1, "verified": True}),
        _event("payment_info", "u", 46, {**pay2, "user_id": 8}),
    ]
    run_history(lake, History([*setup, *changes], [len(setup)]), Store(tmp_path / "state.sqlite") if indexed else None)
    feeds = {
        view: sorted((tuple(r[k] for k in key), r["op"]) for r in lake.spark.table(lake.names.view_changes(view))
                     .where("batch_id = 1").collect())
        for view, key in (("user_profile", ("email",)), ("repo_summary", ("owner", "name")))
    }  # fmt: skip
    assert feeds == {
        "user_profile": [((f"{n}@x.io",), "upsert") for n in ["ann", "bob", "cy", "dee", "eve", "fay", "gus", "hal"]],
        "repo_summary": [
            (tuple(repo.split("/")), "upsert")
            for repo in ["ann/lake", "anna/pond", "cy/lake", "dee/pond", "eve/sea", "ivy/hill"]
        ],
    }


def test_a_batch_that_changes_nothing_visible_writes_nothing(lake):
    processor = BatchProcessor(lake.spark, lake.names, lake.sources, view_plans(lake))
    pr = {"title": "fix", "repo": "lake", "repo_owner": "ann", "index": 1, "author": "ann", "status": "open",
          "created_at": "2024-03-01T12:00:00Z"}  # fmt: skip
    first = [
        (dbz("c", 1, _user("a@x.io", "ann", 1)), at("users")),
        (dbz("c", 2, _repo("ann", "lake", "d")), at("repos")),
        (dbz("c", 3, pr, wrapped=True), at("pull_requests")),
        (dbz("c", 4, _star("ann", "ann", "lake")), at("stars")),
        (dbz("c", 5, {"id": 1, "user_id": 1, "verified": True}), at("payment_info")),
    ]
    processor.process_lines(0, first)
    tables = [*(m.table for m in processor.maintainers), lake.names.feeds]
    snapshots = {t: _snapshots(lake, t) for t in tables}
    feeds = {t: lake.spark.table(t).count() for t in (lake.names.view_changes(m.plan.name) for m in processor.maintainers)}
    assert all(feeds.values())

    # 1. replays of already-applied events (one per table, verbatim, old positions)
    result = processor.process_lines(1, [first[2], first[0], first[4]])
    assert result.merged == {"users": 0, "pull_requests": 0, "payment_info": 0}
    assert {t: _snapshots(lake, t) for t in tables} == snapshots
    assert {t: lake.spark.table(t).count() for t in feeds} == feeds

    # 2. newer changes no view can see: columns no view reads, the same instant spelled differently
    invisible = [
        (dbz("u", 10, {**_user("a@x.io", "ann", 1), "registered_at": T_MICROS + 7}), at("users")),
        (dbz("u", 11, {**_repo("ann", "lake", "d"), "star_count": 99}, before=None), at("repos")),
        (dbz("u", 12, {**pr, "created_at": "2024-03-01T13:00:00+01:00"}), at("pull_requests")),
        (dbz("u", 13, {**_star("ann", "ann", "lake"), "created_at": T_MICROS + 1}), at("stars")),
    ]
    result = processor.process_lines(2, invisible)
    assert result.merged == {"users": 1, "repos": 1, "pull_requests": 1, "stars": 1}
    assert {t: _snapshots(lake, t) for t in tables} == snapshots
    assert {t: lake.spark.table(t).count() for t in feeds} == feeds
    assert_views_equal_recomputes(lake, processor)
