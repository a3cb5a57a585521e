"""Event sources: durations, declarations, event parsing, lateness, time windows and window finality. Pure Python."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import duckdb
import pytest

from lakemv.catalog.declarations import parse_source
from lakemv.core.cdc import events
from lakemv.core.cdc.changeset import build_changeset
from lakemv.core.cdc.envelope import Change, Skip
from lakemv.core.durations import format_duration, parse_duration
from lakemv.core.errors import ConfigError, EnvelopeError, ViewDefinitionError
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import parse_view
from lakemv.core.planner.explain import explain
from lakemv.core.planner.finality import FINAL, Finality, checked_sql, final_rows_sql, finality, finalizing_sql, window_of
from lakemv.core.planner.retention import horizon, needs, settles, source_needs
from lakemv.duck.verify import duckdb_sql

MIN = 60_000_000
HOUR = 60 * MIN
COLUMNS = """columns = [
  { name = "view_id", type = "string" },
  { name = "repo", type = "string" },
  { name = "viewed_at", type = "timestamp", encoding = "%s" },
  { name = "day", type = "date" },
]"""
EVENTS_HEAD = 'name = "page_views"\nkind = "events"\nevent_id = "view_id"\nevent_time = "viewed_at"\n'


def source(extra: str = 'lateness = "10 minutes"', encoding: str = "iso", head: str = EVENTS_HEAD):
    return parse_source(f"{head}{extra}\n{COLUMNS % encoding}", "sources/page_views.toml")


def micros(text: str) -> int:
    return int((datetime.fromisoformat(text).replace(tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() * 1_000_000)


def view_line(view_id: str, at: str, repo: str = "lakemv", **extra) -> str:
    return json.dumps({"view_id": view_id, "repo": repo, "viewed_at": at, "day": 19723, **extra})


PV = source()
USERS = parse_source(
    'name = "users"\nprimary_key = ["email"]\ncolumns = [{ name = "email", type = "string" }, { name = "n", type = "bigint" }]',
    "sources/users.toml",
)
SOURCES = {"page_views": PV, "users": USERS}


# --- lakemv.core.durations ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10 minutes", 10 * MIN),
        ("1 hour 30 minutes", 90 * MIN),
        ("500 ms", 500_000),
        ("3 mins", 3 * MIN),
        ("interval 5 min", 5 * MIN),
        ("  2 Days ", 2 * 24 * HOUR),
        ("1 week", 7 * 24 * HOUR),
        ("1 second", 1_000_000),
        ("7 us", 7),
    ],
)
def test_parse_duration(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "is not a duration"),
        ("ten minutes", "is not a duration"),
        ("5", "is not a duration"),
        ("5 minutes and a bit", "is not a duration"),
        ("-5 minutes", "is not a duration"),
        ("5 fortnights", "unknown unit 'fortnights'"),
    ],
)
def test_parse_duration_rejects(text, message):
    with pytest.raises(ValueError, match=message):
        parse_duration(text)


@pytest.mark.parametrize(
    ("value", "spelled"),
    [
        (HOUR, "1 hour"),
        (90 * MIN, "1 hour 30 minutes"),
        (14 * 24 * HOUR, "2 weeks"),
        (8 * 24 * HOUR, "8 days"),  # not "1 week 1 day": weeks only when exact
        (1_500, "1 millisecond 500 microseconds"),
        (25 * HOUR + 1, "1 day 1 hour 1 microsecond"),
        (0, "0 seconds"),
    ],
)
def test_format_duration_is_shortest_and_round_trips(value, spelled):
    assert format_duration(value) == spelled
    assert parse_duration(spelled) == value


# --- lakemv.catalog.declarations ------------------------------------------------------------------------


def test_event_source_is_keyed_by_its_event_id():
    assert PV.is_events and PV.primary_key == ("view_id",)
    assert (PV.event_id, PV.event_time, PV.late, PV.partition) == ("view_id", "viewed_at", "dead_letter", "day")
    assert PV.lateness_micros == 10 * MIN and PV.describe_lateness() == "10 minutes"
    custom = source('lateness = "interval 90 min"\nlate = "count"\npartition = "hour"\nprimary_key = ["view_id"]')
    assert (custom.late, custom.partition, custom.lateness_micros, custom.describe_lateness()) == ("count", "hour", 90 * MIN, "1 hour 30 minutes")
    assert source("").lateness_micros == 0 and not USERS.is_events


@pytest.mark.parametrize(
    ("head", "message"),
    [
        (EVENTS_HEAD.replace('"viewed_at"', '"day"'), "event_time 'day' must be a timestamp column, not date"),
        (EVENTS_HEAD.replace('"viewed_at"', '"repo"'), "must be a timestamp column, not string"),
        (EVENTS_HEAD.replace('"viewed_at"', '"nope"'), "event_time 'nope' is not a declared column"),
        (EVENTS_HEAD.replace('event_id = "view_id"', 'event_id = "nope"'), "event_id 'nope' is not a declared column"),
        (EVENTS_HEAD.replace('event_id = "view_id"', 'primary_key = ["view_id"]'), "needs event_id"),
        (EVENTS_HEAD + 'primary_key = ["repo"]\n', "primary_key must be ['view_id'] or left out"),
        (EVENTS_HEAD + 'unique = [["repo"]]\n', "no unique keys besides its event id"),
        (EVENTS_HEAD + 'lateness = "soon"\n', "'soon' is not a duration"),
        (EVENTS_HEAD + 'lateness = "5 fortnights"\n', "unknown unit 'fortnights'"),
        (EVENTS_HEAD + 'late = "drop"\n', "late:"),
        ('name = "page_views"\nprimary_key = ["view_id"]\nevent_id = "view_id"\n', 'event_id applies to event sources only: add kind = "events"'),
        ('name = "page_views"\nprimary_key = ["view_id"]\nevent_time = "viewed_at"\n', "event_time applies to event sources only"),
    ],
)
def test_bad_event_declarations(head, message):
    with pytest.raises(ConfigError, match="^sources/page_views.toml: ") as caught:
        source("", head=head)
    assert message in str(caught.value)


def test_event_source_without_event_id_or_key_is_refused():
    # Without event_id there is no key: refused, saying what an event source needs.
    with pytest.raises(ConfigError, match="an event source needs event_id"):
        source("", head=EVENTS_HEAD.replace('event_id = "view_id"\n', ""))


# --- lakemv.core.cdc.events: parsing -----------------------------------------------------------------------


def test_parse_event_iso():
    change = events.parse_event(view_line("v1", "2024-01-01T10:00:00Z"), PV)
    at = micros("2024-01-01T10:00:00")
    assert change == Change("page_views", "c", ("v1",), 0, at // 1000, ("v1", "lakemv", at, 19723), (), ())
    assert not change.is_delete


def test_parse_event_epoch_micros_records_unknown_and_absent_fields():
    at = 1_700_000_000_123_456
    change = events.parse_event(json.dumps({"view_id": "v2", "viewed_at": at, "referrer": "hn"}), source(encoding="micros"))
    assert change.row == ("v2", None, at, None) and change.key == ("v2",)
    assert change.source_ts_ms == 1_700_000_000_123 and change.position == 0 and change.op == "c"
    assert change.unknown == (("referrer", "hn"),) and change.absent == ("repo", "day")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (json.dumps({"repo": "x", "viewed_at": "2024-01-01T10:00:00Z"}), "missing event id field 'view_id'"),
        (json.dumps({"view_id": None, "viewed_at": "2024-01-01T10:00:00Z"}), "missing event id field 'view_id'"),
        (json.dumps({"view_id": "v", "repo": "x"}), "missing event time field 'viewed_at'"),
        ("[1, 2]", "expected a JSON object, found list"),
        ('"v1"', "expected a JSON object, found str"),
        ('{"view_id": "v1",', "malformed JSON"),
    ],
)
def test_parse_event_rejects(text, reason):
    with pytest.raises(EnvelopeError, match=reason):
        events.parse_event(text, PV)


@pytest.mark.parametrize(("text", "reason"), [(None, "tombstone (null value)"), ("", "blank line"), ("  \t ", "blank line")])
def test_parse_event_skips(text, reason):
    assert events.parse_event(text, PV) == Skip(reason)


# --- lakemv.core.cdc.events: watermark and lateness --------------------------------------------------------


def test_watermark_is_clock_minus_lateness():
    assert events.watermark(None, PV) is None
    assert events.watermark(micros("2024-01-01T10:30:00"), PV) == micros("2024-01-01T10:20:00")
    assert events.watermark(123, source("")) == 123


def test_late_reason_boundary_and_message():
    mark = micros("2024-01-01T10:20:00")
    on_time = events.parse_event(view_line("a", "2024-01-01T10:20:00Z"), PV)
    late = events.parse_event(view_line("b", "2024-01-01T10:19:59.999999Z"), PV)
    assert events.late_reason(on_time, PV, mark) is None
    assert events.late_reason(late, PV, None) is None
    reason = events.late_reason(late, PV, mark)
    assert reason == (
        "late event: viewed_at 2024-01-01T10:19:59.999999Z is older than the watermark 2024-01-01T10:20:00Z "
        "(newest event time seen minus the allowed lateness of 10 minutes)"
    )


def test_first_per_key_keeps_the_first_and_counts_repeats():
    a1, b, a2, a3 = (Change("page_views", "c", (k,), 0, 0, (k, n)) for k, n in (("a", 1), ("b", 2), ("a", 3), ("a", 4)))
    assert events.first_per_key([a1, b, a2, a3]) == ([a1, b], 2)
    assert events.first_per_key([]) == ([], 0)


# --- lakemv.core.cdc.changeset with events -----------------------------------------------------------------

PV_FILE, USERS_FILE = "/landing/page_views/a.json", "file:///landing/users/b.json"


def cdc(email: str, lsn: int, n: int) -> str:
    return json.dumps({"op": "u", "before": None, "after": {"email": email, "n": n}, "source": {"lsn": lsn, "ts_ms": 1000}})


def batch_lines():
    return [
        (view_line("v1", "2024-01-01T10:25:00Z", repo="first"), PV_FILE),
        (view_line("late", "2024-01-01T10:19:00Z"), PV_FILE),
        (cdc("a@x.io", 2, 20), USERS_FILE),
        (view_line("v1", "2024-01-01T10:26:00Z", repo="second"), PV_FILE),
        (view_line("edge", "2024-01-01T10:20:00Z"), PV_FILE),
        (cdc("a@x.io", 1, 10), USERS_FILE),
        (view_line("v1", "2024-01-01T10:27:00Z", repo="third"), PV_FILE),
    ]


WATERMARKS = {"page_views": micros("2024-01-01T10:20:00"), "users": None}


def test_late_event_is_a_dead_letter_and_duplicates_keep_the_first_line():
    batch = build_changeset(batch_lines(), SOURCES, None, WATERMARKS)
    views = {c.key[0]: c.row[1] for c in batch.changes["page_views"]}
    assert views == {"v1": "first", "edge": "lakemv"}
    (dead,) = batch.dead_letters
    assert (dead.table, dead.source_file) == ("page_views", PV_FILE) and json.loads(dead.raw)["view_id"] == "late"
    assert dead.reason.startswith("late event: viewed_at 2024-01-01T10:19:00Z is older than the watermark 2024-01-01T10:20:00Z")
    assert batch.skipped == {events.DUPLICATE: 2}
    assert batch.late == {"page_views": 1}  # a dead letter, and counted late for its source
    assert batch.events == 6  # every parsed line but the late one, before dedupe
    (user,) = batch.changes["users"]  # CDC: the highest position wins, no lateness, no event dedupe
    assert (user.position, user.row) == (2, ("a@x.io", 20))


def test_late_event_counted_when_declared():
    counting = {**SOURCES, "page_views": source('lateness = "10 minutes"\nlate = "count"')}
    batch = build_changeset(batch_lines(), counting, None, WATERMARKS)
    assert batch.dead_letters == []
    assert batch.skipped == {events.LATE_COUNTED: 1, events.DUPLICATE: 2}
    assert batch.late == {"page_views": 1}
    assert sorted(c.key[0] for c in batch.changes["page_views"]) == ["edge", "v1"]


def test_no_watermark_admits_every_event():
    for marks in (None, {"page_views": None}):
        batch = build_changeset(batch_lines(), SOURCES, None, marks)
        assert batch.late == {}
        assert batch.dead_letters == [] and sorted(c.key[0] for c in batch.changes["page_views"]) == ["edge", "late", "v1"]


# --- lakemv.core.planner.timewindows via parse_view ------------------------------------------------------------

START15 = "TIMESTAMP_MICROS(UNIX_MICROS(viewed_at) - PMOD(UNIX_MICROS(viewed_at) - 0, 900000000))"


def test_tumbling_window_rewritten_to_arithmetic():
    view = parse_view(
        "-- @key: repo, w\nSELECT repo, window.start AS w, window.end AS e, count(*) AS n "
        "FROM page_views GROUP BY repo, window(viewed_at, '15 minutes')",
        "views",
    )
    assert "window" not in view.sql.lower()
    assert view.sql == (
        f"SELECT repo, {START15} AS w, TIMESTAMP_MICROS(UNIX_MICROS({START15}) + 900000000) AS e, COUNT(*) AS n "
        f"FROM page_views GROUP BY repo, {START15}"
    )
    called = parse_view(
        "-- @key: repo, w\nSELECT repo, window(viewed_at, '15 minutes').start AS w, window(viewed_at, '15 minutes').end AS e, "
        "count(*) AS n FROM page_views GROUP BY repo, window(viewed_at, '15 minutes')",
        "views",
    )
    assert called.sql == view.sql


def test_window_start_offset_is_in_the_arithmetic():
    view = parse_view("-- @key: repo, w\nSELECT repo, window.start AS w FROM pv GROUP BY repo, window(viewed_at, '1 hour', '1 hour', '15 minutes')", "v")
    assert "PMOD(UNIX_MICROS(viewed_at) - 900000000, 3600000000)" in view.sql


def test_hopping_window_is_a_union_of_tumbling_windows_at_each_slide():
    text = "-- @key: repo, w\nSELECT repo, window.start AS w, count(*) AS n FROM page_views GROUP BY repo, window(viewed_at, '1 hour', '20 minutes')"
    view = parse_view(text, "hop")
    offsets = [f"PMOD(UNIX_MICROS(viewed_at) - {o}, 3600000000)" for o in (0, 1_200_000_000, 2_400_000_000)]
    assert view.sql.count(" UNION ALL ") == 2 and all(o in view.sql for o in offsets)
    plan = plan_view(view, SOURCES)
    assert len(plan.branches) == 3 and plan.columns[-1] == FINAL and plan.finality is not None
    assert plan.finality.size == 3_600_000_000


@pytest.mark.parametrize(
    ("group", "message"),
    [
        ("window(viewed_at, '1 hour', '25 minutes')", "size must be a whole number of slides"),
        ("window(viewed_at, '1 hour', '2 hours')", "a slide longer than the size"),
        ("window(viewed_at, '1 hour', '1 hour', '1 hour')", "start offset must be smaller than the slide"),
        ("window(viewed_at, '1 hour'), window(viewed_at, '2 hours')", "may group by one window(); found 2"),
        ("window(viewed_at, size_col)", "the size must be a string literal"),
        ("window(viewed_at, '1 fortnight')", "unknown unit 'fortnight'"),
        ("window(viewed_at, '0 seconds')", "the size must be positive"),
        ("window(viewed_at)", "takes a time column, a size"),
    ],
)
def test_unsupported_windows_are_refused(group, message):
    with pytest.raises(ViewDefinitionError) as caught:
        parse_view(f"-- @key: repo, w\nSELECT repo, window.start AS w, count(*) AS n FROM pv GROUP BY repo, {group}", "hops")
    assert caught.value.view == "hops" and message in caught.value.reason


# --- lakemv.core.planner.finality ----------------------------------------------------------------------

HOURLY = Finality(source="page_views", column="hour", end="{start} + INTERVAL '1' HOUR", size=3_600_000_000, lateness=10 * MIN)


@pytest.mark.parametrize(
    ("expression", "end"),
    [
        ("date_trunc('hour', viewed_at)", ("{start} + INTERVAL '1' HOUR", 3_600_000_000)),
        ("date_trunc('DAY', _lmv_self.viewed_at)", ("{start} + INTERVAL '1' DAY", 86_400_000_000)),
        ("date_trunc('month', viewed_at)", ("{start} + INTERVAL '1' MONTH", 31 * 86_400_000_000)),
        (START15, ("timestamp_micros(unix_micros({start}) + 900000000)", 900_000_000)),
        ("date_trunc('hour', repo)", None),
        ("viewed_at", None),
        ("date_trunc('millisecond', viewed_at)", None),
        (START15.replace("viewed_at", "other"), None),
    ],
)
def test_window_of(expression, end):
    assert window_of(expression, "viewed_at") == end


def test_finality_needs_an_event_source_anchor():
    keys = {"repo": "_lmv_self.repo", "hour": "date_trunc('hour', _lmv_self.viewed_at)"}
    assert finality(keys, "page_views", SOURCES) == HOURLY
    assert finality(keys, "users", SOURCES) is None
    assert finality({"repo": "_lmv_self.repo"}, "page_views", SOURCES) is None




@pytest.fixture
def duck():
    con = duckdb.connect()
    con.execute("SET TimeZone='UTC'")
    yield con
    con.close()


@pytest.mark.parametrize(
    ("mark", "flags"),
    [(None, [False, False]), ("2024-01-01T10:59:59.999999", [False, False]), ("2024-01-01T11:00:00", [True, False]), ("2024-01-01T12:00:00", [True, True])],
)
def test_final_rows_sql_judges_window_end_against_watermark(duck, mark, flags):
    body = "SELECT CAST('2024-01-01 10:00:00' AS TIMESTAMP) AS hour UNION ALL SELECT CAST('2024-01-01 11:00:00' AS TIMESTAMP) AS hour"
    assert final_rows_sql(body, None, {"page_views": 1}) == body
    sql = final_rows_sql(body, HOURLY, {"page_views": None if mark is None else micros(mark)})
    assert [row[1] for row in duck.execute(duckdb_sql(sql) + " ORDER BY hour").fetchall()] == flags


def test_finalizing_sql_selects_newly_final_keys(duck):
    duck.execute("CREATE TABLE vt (repo VARCHAR, hour TIMESTAMP, window_final BOOLEAN)")
    duck.execute("INSERT INTO vt VALUES ('r', '2024-01-01 09:00', false), ('r', '2024-01-01 10:00', false), ('r', '2024-01-01 11:00', false), ('s', '2024-01-01 09:00', true)")
    mark, since = micros("2024-01-01T11:00:00"), micros("2024-01-01T10:00:00")
    rows = duck.execute(duckdb_sql(finalizing_sql(HOURLY, "vt", ("repo", "hour"), mark, None)) + " ORDER BY 2").fetchall()
    assert [(r, h.hour) for r, h in rows] == [("r", 9), ("r", 10)]
    rows = duck.execute(duckdb_sql(finalizing_sql(HOURLY, "vt", ("repo", "hour"), mark, since))).fetchall()
    assert [(r, h.hour) for r, h in rows] == [("r", 10)]


def test_checked_sql_derives_watermark_from_the_table(duck):
    duck.execute("CREATE TABLE page_views (view_id VARCHAR, viewed_at TIMESTAMP)")
    # newest 11:10, lateness 10 minutes: watermark 11:00 closes the 10:00 hour exactly, not the 11:00 one
    duck.execute("INSERT INTO page_views VALUES ('a', '2024-01-01 10:05'), ('b', '2024-01-01 10:55'), ('c', '2024-01-01 11:10')")
    view = "SELECT date_trunc('hour', viewed_at) AS hour, count(*) AS n FROM page_views GROUP BY date_trunc('hour', viewed_at)"
    assert checked_sql(view, None, SOURCES) == view
    rows = duck.execute(duckdb_sql(checked_sql(view, HOURLY, SOURCES)) + " ORDER BY hour").fetchall()
    assert [(h.hour, n, final) for h, n, final in rows] == [(10, 2, True), (11, 1, False)]


HOURLY_VIEW = "-- @key: repo, hour\nSELECT repo, date_trunc('hour', {col}) AS hour, count(*) AS {n} FROM {table} GROUP BY repo, date_trunc('hour', {col})"


def test_plan_of_windowed_view_over_events_gets_window_final():
    plan = plan_view(parse_view(HOURLY_VIEW.format(col="viewed_at", n="n", table="page_views"), "hourly"), SOURCES)
    assert plan.columns == ("repo", "hour", "n", FINAL)
    assert plan.finality == HOURLY


def test_plan_of_tumbling_window_view_gets_window_final():
    text = "-- @key: repo, w\nSELECT repo, window.start AS w, count(*) AS n FROM page_views GROUP BY repo, window(viewed_at, '15 minutes')"
    plan = plan_view(parse_view(text, "quarterly"), SOURCES)
    assert plan.columns[-1] == FINAL
    assert plan.finality == Finality(
        source="page_views", column="w", end="timestamp_micros(unix_micros({start}) + 900000000)", size=900_000_000, lateness=10 * MIN
    )


def test_plan_without_event_time_window_has_no_finality():
    tables = {**SOURCES, "page_table": source("", head='name = "page_table"\nprimary_key = ["view_id"]\n')}
    over_table = plan_view(parse_view(HOURLY_VIEW.format(col="viewed_at", n="n", table="page_table"), "t"), tables)
    assert over_table.finality is None and FINAL not in over_table.columns
    by_day = plan_view(parse_view("-- @key: repo, day\nSELECT repo, day, count(*) AS n FROM page_views GROUP BY repo, day", "d"), SOURCES)
    assert by_day.finality is None and by_day.columns == ("repo", "day", "n")


def test_user_column_named_window_final_is_refused_on_windowed_view():
    with pytest.raises(ViewDefinitionError, match="gets a column 'window_final' of its own"):
        plan_view(parse_view(HOURLY_VIEW.format(col="viewed_at", n=FINAL, table="page_views"), "clash"), SOURCES)
    tables = {**SOURCES, "page_table": source("", head='name = "page_table"\nprimary_key = ["view_id"]\n')}
    plain = plan_view(parse_view(HOURLY_VIEW.format(col="viewed_at", n=FINAL, table="page_table"), "ok"), tables)
    assert plain.columns == ("repo", "hour", FINAL) and plain.finality is None


# --- lakemv.duck.verify: window arithmetic on DuckDB -------------------------------------------------


@pytest.mark.parametrize(
    ("at", "start"),
    [
        ("2024-05-01 10:37:12", datetime(2024, 5, 1, 10, 30, tzinfo=UTC)),
        ("2024-05-01 10:45:00", datetime(2024, 5, 1, 10, 45, tzinfo=UTC)),
        ("2024-05-01 10:44:59.999999", datetime(2024, 5, 1, 10, 30, tzinfo=UTC)),
        ("1969-12-31 23:59:00", datetime(1969, 12, 31, 23, 45, tzinfo=UTC)),
        ("1969-12-31 23:45:00", datetime(1969, 12, 31, 23, 45, tzinfo=UTC)),
    ],
)
def test_duckdb_runs_spark_window_start(duck, at, start):
    spark = "SELECT timestamp_micros(unix_micros(t) - pmod(unix_micros(t) - 0, 900000000)) AS w FROM (SELECT CAST('{at}' AS TIMESTAMP) AS t) AS x"
    sql = duckdb_sql(spark.format(at=at))
    assert "pmod" not in sql.lower() and "timestamp_micros" not in sql.lower()
    ((got,),) = duck.execute(sql).fetchall()
    assert got == start


# --- enrichment: as of processing ----------------------------------------------------------------

AS_OF = "-- @key: {key}\n-- @enrich: {enrich}\nSELECT pv.view_id, pv.repo, pv.viewed_at, u.n FROM page_views pv LEFT JOIN users u ON u.email = pv.repo"


def test_as_of_processing_view_follows_only_its_events():
    plan = plan_view(parse_view(AS_OF.format(key="view_id", enrich="as_of_processing"), "seen"), SOURCES)
    assert plan.as_of_processing and [plan.reached_by(t) for t in ("page_views", "users")] == [True, False]
    assert plan.event_columns == ("view_id", "repo", "viewed_at")
    twin = plan_view(parse_view(AS_OF.format(key="view_id", enrich="table_table"), "seen"), SOURCES)
    assert not twin.as_of_processing and twin.reached_by("users") and twin.event_columns == ()
    assert plan.definition.fingerprint != twin.definition.fingerprint  # switching semantics rebuilds the view


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (AS_OF.format(key="repo, view_id", enrich="as_of_processing"), "key it by page_views's event id 'view_id' alone"),
        ("-- @key: email\n-- @enrich: as_of_processing\nSELECT u.email, u.n FROM users u", "its key must come from an event source, not users"),
        ("-- @key: repo, hour\n-- @enrich: as_of_processing\nSELECT repo, date_trunc('hour', viewed_at) AS hour, count(*) AS n "
         "FROM page_views GROUP BY repo, date_trunc('hour', viewed_at)", "key it by page_views's event id"),
        (AS_OF.format(key="view_id", enrich="as_of_arrival"), "@enrich: unknown semantics 'as_of_arrival'"),
    ],
)
def test_as_of_processing_refusals(text, message):
    with pytest.raises(ViewDefinitionError) as caught:
        plan_view(parse_view(text, "seen"), SOURCES)
    assert message in str(caught.value)


def test_as_of_processing_needs_no_events_kept():
    plan = plan_view(parse_view(AS_OF.format(key="view_id", enrich="as_of_processing"), "seen"), SOURCES)
    assert needs(plan, "page_views") == [("page_views", 0)]
    twin = plan_view(parse_view(AS_OF.format(key="view_id", enrich="table_table"), "seen"), SOURCES)
    assert needs(twin, "page_views") is None  # a users change may reach any event's row


# --- stream-stream joins: time bounds and retention ----------------------------------------------

SEARCHES = parse_source(
    'name = "searches"\nkind = "events"\nevent_id = "search_id"\nevent_time = "searched_at"\nlateness = "5 minutes"\n'
    'columns = [{ name = "search_id", type = "string" }, { name = "query", type = "string" }, { name = "searched_at", type = "timestamp" }]',
    "sources/searches.toml",
)
CLICKS = parse_source(
    'name = "clicks"\nkind = "events"\nevent_id = "click_id"\nevent_time = "clicked_at"\n'
    'columns = [{ name = "click_id", type = "string" }, { name = "search_id", type = "string" }, { name = "clicked_at", type = "timestamp" }]',
    "sources/clicks.toml",
)
STREAMS = {"searches": SEARCHES, "clicks": CLICKS, **SOURCES}
JOIN = "-- @key: click_id\nSELECT c.click_id, s.query FROM clicks c JOIN searches s ON s.search_id = c.search_id AND {condition}"


@pytest.mark.parametrize(
    ("condition", "bound"),
    [
        ("c.clicked_at BETWEEN s.searched_at AND s.searched_at + INTERVAL '1' HOUR", (0, HOUR)),
        ("c.clicked_at >= s.searched_at - INTERVAL 5 MINUTES AND s.searched_at + INTERVAL '30' MINUTE > c.clicked_at", (-5 * MIN, 30 * MIN)),
        ("s.searched_at <= c.clicked_at AND c.clicked_at <= s.searched_at + INTERVAL '2' HOUR AND c.clicked_at <= s.searched_at + INTERVAL '1' HOUR", (0, HOUR)),
    ],
)
def test_time_bound_between_two_event_streams(condition, bound):
    plan = plan_view(parse_view(JOIN.format(condition=condition), "clicked"), STREAMS)
    assert plan.bound is not None and (plan.bound.first, plan.bound.second) == ("clicks", "searches")
    assert (plan.bound.low, plan.bound.high) == bound


@pytest.mark.parametrize(
    "condition",
    ["c.clicked_at >= s.searched_at", "c.clicked_at <= s.searched_at + INTERVAL '1' HOUR", "s.query <> ''"],
)
def test_a_join_bounded_on_one_side_only_keeps_every_event(condition):
    plan = plan_view(parse_view(JOIN.format(condition=condition), "clicked"), STREAMS)
    assert plan.bound is None and needs(plan, "clicks") is None and needs(plan, "searches") is None


def test_retention_of_a_bounded_join_follows_the_other_streams_watermark():
    plan = plan_view(parse_view(JOIN.format(condition="c.clicked_at BETWEEN s.searched_at AND s.searched_at + INTERVAL '1' HOUR"), "j"), STREAMS)
    # a click can meet a search until the searches' watermark passes it; a search, a click within the hour
    assert needs(plan, "clicks") == [("searches", 0)] and needs(plan, "searches") == [("clicks", -HOUR)]
    wanted = source_needs("searches", [plan])
    assert wanted == [("searches", 0), ("clicks", -HOUR)]
    assert horizon(wanted, {"searches": 10 * HOUR, "clicks": 10 * HOUR + 20 * MIN}) == 9 * HOUR + 20 * MIN
    assert horizon(wanted, {"searches": 10 * HOUR, "clicks": None}) is None  # no click yet: keep every search
    windowed = plan_view(parse_view(HOURLY_VIEW.format(col="viewed_at", n="n", table="page_views"), "h"), SOURCES)
    assert needs(windowed, "page_views") == [("page_views", -HOUR)]
    assert source_needs("page_views", [windowed, plan]) == [("page_views", 0), ("page_views", -HOUR)]
    assert source_needs("page_views", []) == [("page_views", 0)]  # no view: what a redelivery may repeat


# --- settled view rows: the state drops their digests ----------------------------------------------


def test_rows_settle_when_no_admitted_event_can_reach_them():
    joined = plan_view(parse_view(JOIN.format(condition="c.clicked_at BETWEEN s.searched_at AND s.searched_at + INTERVAL '1' HOUR")
                                  .replace("s.query FROM", "s.query, c.clicked_at AS at FROM"), "j"), STREAMS)  # fmt: skip
    assert joined.anchor_time == "at" and settles(joined) == ("at", "clicks", 0)
    hourly = plan_view(parse_view(HOURLY_VIEW.format(col="viewed_at", n="n", table="page_views"), "h"), SOURCES)
    assert settles(hourly) == (hourly.finality.column, "page_views", -HOUR)  # a window's row: a window before the horizon
    seen = AS_OF.format(key="view_id", enrich="as_of_processing")
    assert settles(plan_view(parse_view(seen, "seen"), SOURCES)) == ("viewed_at", "page_views", 0)
    untimed = plan_view(parse_view(seen.replace(", pv.viewed_at", ""), "seen"), SOURCES)
    assert untimed.anchor_time is None and settles(untimed) is None  # no column says when its event happened
    table_table = plan_view(parse_view(AS_OF.format(key="view_id", enrich="table_table"), "t"), SOURCES)
    assert table_table.anchor_time == "viewed_at" and settles(table_table) is None  # a users change reaches any row
    unbounded = plan_view(parse_view(JOIN.format(condition="c.clicked_at >= s.searched_at").replace("s.query FROM", "c.clicked_at FROM"), "u"), STREAMS)
    assert settles(unbounded) is None


def test_the_store_drops_the_digests_of_settled_rows():
    from lakemv.core.state.layout import ViewPart
    from lakemv.core.state.store import Store

    store = Store(":memory:")
    store.attach_view(ViewPart(view="w", key=("k",), definition="d", settle="hour"))
    store.attach_view(ViewPart(view="plain", key=("k",), definition="d"))
    store.put_digests("w", [((1,), "a"), ((2,), "b"), ((3,), "c")], times=[10, 20, None])
    store.put_digests("plain", [((1,), "a")])
    assert store.settle("w", 20) == 1 and store.digests("w", [(1,), (2,), (3,)]) == {(2,): "b", (3,): "c"}
    assert store.settle("plain", 99) == 0 and store.view_count("plain") == 1
    assert ViewPart(view="w", key=("k",), definition="d").fingerprint != ViewPart(view="w", key=("k",), definition="d", settle="hour").fingerprint


# --- the journal keeps the watermarks a replay judges by ------------------------------------------


def test_journal_keeps_the_watermarks_of_units_it_may_replay(tmp_path):
    import pyarrow as pa

    from lakemv.core.batch.journal import BatchRef, Journal, TablePlan

    journal = Journal(tmp_path / "journal")
    assert journal.pending_watermarks() == {}
    plan = {"page_views": TablePlan(pa.table({"x": [1]}), None)}
    journal.save(BatchRef("s", 4), plan, {"page_views": 40 * MIN, "clicks": None})
    journal.save(BatchRef("s", 5), plan, {"page_views": 30 * MIN, "clicks": 7})
    assert journal.watermarks(BatchRef("s", 4)) == {"page_views": 40 * MIN, "clicks": None}
    assert journal.watermarks(BatchRef("other", 4)) is None  # another stream's folder
    # the lowest per source; None wins: a unit judged before the source had a watermark needs every event
    assert journal.pending_watermarks() == {"page_views": 30 * MIN, "clicks": None}
    journal.forget_before(BatchRef("s", 5))
    assert journal.pending_watermarks() == {"page_views": 30 * MIN, "clicks": 7}


# --- review fixes: what the state keeps, and what a rebuild is judged by --------------------------


def test_a_join_that_aggregates_the_other_stream_keeps_every_event():
    grouped = (
        "-- @key: search_id\nSELECT s.search_id, count(c.click_id) AS clicks FROM searches s JOIN clicks c "
        "ON c.search_id = s.search_id AND c.clicked_at BETWEEN s.searched_at AND s.searched_at + INTERVAL '1' HOUR GROUP BY s.search_id"
    )
    plan = plan_view(parse_view(grouped, "g"), STREAMS)
    assert plan.bound is None and needs(plan, "clicks") is None and needs(plan, "searches") is None


def test_a_window_that_reads_its_source_twice_keeps_every_event():
    text = (
        "-- @key: repo, hour\nSELECT repo, date_trunc('hour', viewed_at) AS hour, count(*) AS n FROM page_views "
        "WHERE repo IN (SELECT p.repo FROM page_views p WHERE p.view_id = 'x') GROUP BY repo, date_trunc('hour', viewed_at)"
    )
    plan = plan_view(parse_view(text, "w"), SOURCES)
    assert plan.finality is not None and needs(plan, "page_views") is None


def test_a_new_lateness_rebuilds_a_windowed_view_and_reloads_its_events():
    from lakemv.core.state.layout import mirror_parts

    hourly = HOURLY_VIEW.format(col="viewed_at", n="n", table="page_views")
    slow = {**SOURCES, "page_views": source('lateness = "1 hour"')}
    before, after = plan_view(parse_view(hourly, "h"), SOURCES), plan_view(parse_view(hourly, "h"), slow)
    assert before.definition.fingerprint == after.definition.fingerprint and before.fingerprint != after.fingerprint
    plain = plan_view(parse_view("-- @key: email\nSELECT email, n FROM users", "u"), SOURCES)
    assert plain.fingerprint == plain.definition.fingerprint
    parts = [mirror_parts(SOURCES, [], retention={"page_views": rule})["page_views"].fingerprint for rule in ("a", "a", "b")]
    assert parts[0] == parts[1] != parts[2]


def test_every_unit_of_a_batch_is_judged_by_the_watermarks_its_first_unit_started_with(tmp_path):
    import pyarrow as pa

    from lakemv.core.batch.journal import BatchRef, Journal, TablePlan
    from lakemv.spark.batch.runner import BatchProcessor

    class Units:  # the processor's state _batch_watermarks reads (no Spark needed)
        journal = Journal(tmp_path / "journal")
        _pinned = None
        now = {"page_views": 10 * HOUR}

        def watermarks(self):
            return dict(self.now)

    units = Units()
    judge = BatchProcessor._batch_watermarks
    assert judge(units, BatchRef("s", 7, 0)) == {"page_views": 10 * HOUR}
    units.now = {"page_views": 12 * HOUR}  # the first unit's events moved the watermark on
    assert judge(units, BatchRef("s", 7, 1)) == {"page_views": 10 * HOUR}
    assert judge(units, BatchRef("s", 8, 0)) == {"page_views": 12 * HOUR}  # the next batch starts afresh
    # after a restart the first unit's journal entry says what it started with
    units.journal.save(BatchRef("s", 9, 0), {"page_views": TablePlan(pa.table({"x": [1]}), None)}, {"page_views": 11 * HOUR})
    units._pinned, units.now = None, {"page_views": 13 * HOUR}
    assert judge(units, BatchRef("s", 9, 2)) == {"page_views": 11 * HOUR}


def test_window_calls_are_renamed_outside_literals_and_comments_only():
    from lakemv.core.planner.timewindows import rename_calls

    text = "SELECT 'a window (x)' AS t, window(ts, '1 hour') -- window( here\nFROM t GROUP BY WINDOW (ts, '1 hour') /* window( */"
    assert rename_calls(text) == (
        "SELECT 'a window (x)' AS t, lmv_time_window(ts, '1 hour') -- window( here\nFROM t GROUP BY lmv_time_window (ts, '1 hour') /* window( */"
    )
    view = parse_view(
        "-- @key: repo, w\nSELECT repo, window.start AS w, 'window (label)' AS label, count(*) AS n FROM page_views GROUP BY repo, window(viewed_at, '1 hour')",
        "labelled",
    )
    assert "'window (label)'" in view.sql


# --- finality over joins: every joined stream's watermark ------------------------------------------

WINDOWED_JOIN = (
    "-- @key: query, hour\nSELECT s.query, date_trunc('hour', s.searched_at) AS hour, count(*) AS clicks "
    "FROM searches s JOIN clicks c ON c.search_id = s.search_id AND {condition} GROUP BY s.query, date_trunc('hour', s.searched_at)"
)


@pytest.mark.parametrize(
    ("condition", "offset"),
    [
        ("c.clicked_at BETWEEN s.searched_at AND s.searched_at + INTERVAL '1' HOUR", HOUR),  # a click up to an hour after its search
        ("c.clicked_at <= s.searched_at + INTERVAL '30' MINUTE", 30 * MIN),  # bounded above only: enough to close a window
        ("s.searched_at >= c.clicked_at - INTERVAL 5 MINUTES", 5 * MIN),  # the same bound written the other way round
        ("c.clicked_at < s.searched_at - INTERVAL '10' MINUTE", -10 * MIN),  # clicks before their search
    ],
)
def test_a_window_over_a_join_waits_for_each_joined_streams_watermark(condition, offset):
    plan = plan_view(parse_view(WINDOWED_JOIN.format(condition=condition), "hourly_clicks"), STREAMS)
    final = plan.finality
    assert final is not None and final.source == "searches" and final.never is None
    assert final.joined == (("clicks", offset, 0),)
    assert plan.fingerprint.endswith(f"-l{5 * MIN}-clicks{offset:+d}l0")  # a new bound judges windows anew
    # the window [10:00, 11:00) is final once the searches' watermark passes 11:00 and the clicks' 11:00 + offset
    assert final.horizon({"searches": 11 * HOUR, "clicks": 11 * HOUR + offset}) == 11 * HOUR
    assert final.horizon({"searches": 12 * HOUR, "clicks": 11 * HOUR + offset - 1}) == 11 * HOUR - 1  # the clicks hold it open
    assert final.horizon({"searches": 12 * HOUR, "clicks": None}) is None  # no click yet: any may still come
    assert "and clicks's watermark at or past its end" in explain(plan)


@pytest.mark.parametrize("condition", ["c.clicked_at >= s.searched_at", "s.query <> ''"])
def test_a_window_over_an_unbounded_join_never_turns_final(condition, duck):
    plan = plan_view(parse_view(WINDOWED_JOIN.format(condition=condition), "hourly_clicks"), STREAMS)
    final = plan.finality
    assert final is not None and final.never is not None and "joins clicks (c) with no bound" in final.never
    assert final.horizon({"searches": 99 * HOUR, "clicks": 99 * HOUR}) is None
    assert FINAL in plan.columns and "window_final is always false: it joins clicks" in explain(plan)
    body = "SELECT CAST('2024-01-01 10:00:00' AS TIMESTAMP) AS hour"
    assert duck.execute(duckdb_sql(final_rows_sql(body, final, {"searches": micros("2025-01-01T00:00:00")}))).fetchall()[0][1] is False
    assert duck.execute(duckdb_sql(checked_sql(body, final, STREAMS))).fetchall()[0][1] is False


def test_checked_sql_of_a_window_over_a_join_reads_every_streams_watermark(duck):
    plan = plan_view(parse_view(WINDOWED_JOIN.format(condition="c.clicked_at BETWEEN s.searched_at AND s.searched_at + INTERVAL '1' HOUR"), "h"), STREAMS)
    duck.execute("CREATE TABLE searches (search_id VARCHAR, searched_at TIMESTAMP)")
    duck.execute("CREATE TABLE clicks (click_id VARCHAR, clicked_at TIMESTAMP)")
    # searches' watermark 11:00 (newest 11:05, lateness 5 minutes) closes the 10:00 hour for them; clicks
    # (no lateness) must reach 12:00 too: at 11:59 the hour stays open, at 12:00 it is final
    duck.execute("INSERT INTO searches VALUES ('a', '2024-01-01 10:30'), ('b', '2024-01-01 11:05')")
    body = "SELECT CAST('2024-01-01 10:00:00' AS TIMESTAMP) AS hour"
    flags = []
    for newest in ("11:59", "12:00"):
        duck.execute(f"DELETE FROM clicks; INSERT INTO clicks VALUES ('c', '2024-01-01 {newest}')")
        flags.append(duck.execute(duckdb_sql(checked_sql(body, plan.finality, STREAMS))).fetchall()[0][1])
    assert flags == [False, True]
