"""decimal(p,s), date and time columns end to end, on real Spark + Iceberg: Debezium envelopes (with
and without their Connect schema) -> the mirror -> incrementally maintained views -> DuckDB.

One declared source, `orders`, is fed three rounds of landing files through the real streaming ingest
(`lakemv.spark.stream.files.run_ingest`), with and without the local state (and once parsed set-wise by Spark).
Every value is checked exactly against a model kept by this file: `Decimal`s of the declared scale,
`datetime.date`s, times of day as their fixed-width text `HH:MM:SS.ffffff`. Bad values are dead
letters with their reason; the batch they came in goes on.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, time
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import DateType, DecimalType, LongType, StringType

from lakemv.catalog.declarations import parse_source
from lakemv.catalog.tables import DELETED, MIRROR_NAMESPACE, VIEW_NAMESPACE, live_rows_sql
from lakemv.core.batch import choice
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import parse_view
from lakemv.duck.query import connect_duckdb, lake_connection, metadata_location, run_query
from lakemv.duck.verify import verify_view
from lakemv.spark.stream.files import run_ingest

ORDERS = parse_source(
    """
name = "orders"
primary_key = ["id"]
columns = [
  { name = "id", type = "bigint" },
  { name = "customer", type = "string" },
  { name = "amount", type = "decimal(12,2)" },
  { name = "placed_on", type = "date" },
  { name = "placed_at", type = "time" },
  { name = "ledger", type = "decimal(38,4)" },
]
""",
    "tests/integration/test_typed_columns.py",
)
SOURCES = {"orders": ORDERS}

VIEWS = {
    # grouped by a string: decimal sums, the latest date, the earliest time of day
    "by_customer": """-- @key: customer
SELECT customer, sum(amount) AS total, max(placed_on) AS last_day, min(placed_at) AS first_time, count(*) AS orders
FROM orders GROUP BY customer""",
    # keyed by a date and a decimal: both are key columns of the view (and of the local state)
    "by_day_amount": """-- @key: placed_on, amount
SELECT placed_on, amount, count(*) AS orders, min(placed_at) AS first_time, max(ledger) AS top_ledger
FROM orders GROUP BY placed_on, amount""",
}

EPOCH = date(1970, 1, 1)
LEAP_DAY, MARCH_1 = date(2024, 2, 29), date(2024, 3, 1)


def days(day: date) -> int:
    return (day - EPOCH).days


def micros(moment: time) -> int:
    return ((moment.hour * 60 + moment.minute) * 60 + moment.second) * 1_000_000 + moment.microsecond


def unscaled(number: int) -> str:
    """base64 of the big-endian two's-complement bytes of `number` (Connect's Decimal)."""
    length = max(1, (number.bit_length() + 8) // 8)
    return base64.b64encode(number.to_bytes(length, "big", signed=True)).decode()


# ---- Connect schemas, as Debezium's JsonConverter writes them ---------------------------------------------
def decimal_field(name: str, scale: int, precision: int) -> dict[str, Any]:
    return {"type": "bytes", "optional": name != "amount", "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
            "parameters": {"scale": str(scale), "connect.decimal.precision": str(precision)}, "field": name}  # fmt: skip


def logical(name: str, logical_name: str, kind: str) -> dict[str, Any]:
    return {"type": kind, "optional": False, "name": logical_name, "version": 1, "field": name}


ID = {"type": "int64", "optional": False, "default": 0, "field": "id"}
CUSTOMER = {"type": "string", "optional": False, "field": "customer"}
DATE = logical("placed_on", "io.debezium.time.Date", "int32")
MICRO_TIME = logical("placed_at", "io.debezium.time.MicroTime", "int64")
FIELDS = [ID, CUSTOMER, decimal_field("amount", 2, 12), DATE, MICRO_TIME, decimal_field("ledger", 4, 38)]


def with_field(field: dict[str, Any]) -> list[dict[str, Any]]:
    """FIELDS with one field's schema replaced."""
    return [field if f["field"] == field["field"] else f for f in FIELDS]


# decimal.handling.mode=string: plain text fields without a logical name
STRING_DECIMALS = [f if f["field"] not in ("amount", "ledger") else {"type": "string", "optional": True, "field": f["field"]} for f in FIELDS]


def envelope(op: str, lsn: int, after: dict | None = None, before: dict | None = None, fields: list | None = FIELDS) -> str:
    """A Debezium data event: wrapped with its Connect schema, or bare (`fields=None`, values as declared)."""
    payload = {
        "before": before,
        "after": after,
        "source": {"version": "3.6.3.Final", "connector": "postgresql", "name": "shop", "ts_ms": 1_700_000_000_000 + lsn,
                   "db": "shop", "schema": "public", "table": "orders", "lsn": lsn},  # fmt: skip
        "op": op,
        "ts_ms": 1_700_000_000_000 + lsn,
    }
    if fields is None:
        return json.dumps(payload)
    value = {"type": "struct", "fields": fields, "optional": True, "name": "shop.public.orders.Value"}
    schema = {
        "type": "struct",
        "fields": [
            {**value, "field": "before"},
            {**value, "field": "after"},
            {"type": "struct", "fields": [], "optional": False, "name": "io.debezium.connector.postgresql.Source", "field": "source"},
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
        "optional": False,
        "name": "shop.public.orders.Envelope",
        "version": 2,
    }
    return json.dumps({"schema": schema, "payload": payload})


def order(id: int, customer: str, amount: Any, placed_on: Any, placed_at: Any, ledger: Any = None) -> dict[str, Any]:  # noqa: A002
    return {"id": id, "customer": customer, "amount": amount, "placed_on": placed_on, "placed_at": placed_at, "ledger": ledger}


# ---- the rounds, each line with what it must do to the mirror ----------------------------------------------
Row = tuple[str, Decimal, date, str, Decimal | None]  # customer, amount, placed_on, placed_at, ledger


@dataclass(frozen=True)
class Upsert:
    id: int
    row: Row


@dataclass(frozen=True)
class Delete:
    id: int


@dataclass(frozen=True)
class Stale:
    """Older than the row the mirror holds: no effect."""


@dataclass(frozen=True)
class Dead:
    reason: str


# 38 digits: the whole of decimal(38,4). Built without arithmetic: Python's default context rounds to 28 digits.
BIG_UNSCALED = 12345678901234567890123456789012345678
BIG = Decimal("1234567890123456789012345678901234.5678")
PLACEHOLDERS = {"customer": "", "amount": "", "placed_on": 0, "placed_at": 0, "ledger": None}  # a delete's NOT NULL columns

ROUNDS: list[list[tuple[str, Any]]] = [
    [
        # Connect schema: base64 with scale "2", days, MicroTime; a 38-digit decimal(38,4)
        (envelope("c", 100, order(1, "ann", unscaled(1999), days(LEAP_DAY), micros(time(9, 30, 0, 123456)), unscaled(BIG_UNSCALED))),
         Upsert(1, ("ann", Decimal("19.99"), LEAP_DAY, "09:30:00.123456", BIG))),
        # no schema: the declaration's defaults (base64 of the declared scale, days, micros)
        (envelope("c", 101, order(2, "ann", unscaled(500), days(MARCH_1), 0, unscaled(-1)), fields=None),
         Upsert(2, ("ann", Decimal("5.00"), MARCH_1, "00:00:00.000000", Decimal("-0.0001")))),
        # a negative amount; the time in millis (io.debezium.time.Time); no ledger
        (envelope("c", 102, order(3, "bob", unscaled(-25075), days(LEAP_DAY), 45_296_789),
                  fields=with_field(logical("placed_at", "io.debezium.time.Time", "int32"))),
         Upsert(3, ("bob", Decimal("-250.75"), LEAP_DAY, "12:34:56.789000", None))),
        # decimal.handling.mode=string: text, the full 12 digits of decimal(12,2)
        (envelope("c", 103, order(4, "cy", "1234567890.12", days(MARCH_1), micros(time(18, 5)), "0.5"), fields=STRING_DECIMALS),
         Upsert(4, ("cy", Decimal("1234567890.12"), MARCH_1, "18:05:00.000000", Decimal("0.5000")))),
        # no schema, JSON numbers and ISO texts
        (envelope("c", 104, order(5, "dee", 0.1, "2024-03-01", "23:59:59.999999", 7), fields=None),
         Upsert(5, ("dee", Decimal("0.10"), MARCH_1, "23:59:59.999999", Decimal("7.0000")))),
        # bad values: dead letters, the round goes on
        (envelope("c", 105, order(6, "eve", unscaled(12345), days(MARCH_1), 0),
                  fields=with_field(decimal_field("amount", 3, 12))),
         Dead("column 'amount': 12.345 has more than the 2 decimal places of DECIMAL(12,2)")),
        (envelope("c", 106, order(7, "eve", unscaled(100), days(MARCH_1), 86_400_000_001)),
         Dead("column 'placed_at': time 86400000001 is outside one day")),
        (envelope("c", 107, order(8, "eve", 10**12, days(MARCH_1), 0), fields=None),
         Dead("column 'amount': 1000000000000 has more digits than DECIMAL(12,2) holds")),
        (envelope("c", 108, order(9, "eve", "1.00", days(MARCH_1), "25:00:00"), fields=STRING_DECIMALS),
         Dead("column 'placed_at': expected TIME (HH:MM:SS[.ffffff] or a number since midnight), got string '25:00:00'")),
    ],
    [
        # ann's 00:00 order moves to bob; ann's other one gets earlier and dearer
        (envelope("u", 200, order(2, "bob", unscaled(500), days(MARCH_1), 0, unscaled(-1)), fields=None),
         Upsert(2, ("bob", Decimal("5.00"), MARCH_1, "00:00:00.000000", Decimal("-0.0001")))),
        (envelope("u", 201, order(1, "ann", unscaled(2001), days(LEAP_DAY), micros(time(8, 0, 0, 1)), unscaled(BIG_UNSCALED))),
         Upsert(1, ("ann", Decimal("20.01"), LEAP_DAY, "08:00:00.000001", BIG))),
        # a delete whose before-image carries Debezium's placeholders for the NOT NULL columns
        (envelope("d", 202, before={"id": 3, **PLACEHOLDERS}), Delete(3)),
        # cy's second order: -0.01, bare base64
        (envelope("c", 203, order(10, "cy", unscaled(-1), days(MARCH_1), micros(time(7, 0))), fields=None),
         Upsert(10, ("cy", Decimal("-0.01"), MARCH_1, "07:00:00.000000", None))),
        # a schema scale below the declared one: exact all the same (12.5 -> 12.50)
        (envelope("c", 204, order(11, "bob", unscaled(125), days(LEAP_DAY), micros(time(12, 34, 56, 789000))),
                  fields=with_field(decimal_field("amount", 1, 12))),
         Upsert(11, ("bob", Decimal("12.50"), LEAP_DAY, "12:34:56.789000", None))),
        # a stale event (older than the stored row)
        (envelope("u", 50, order(5, "dee", unscaled(9999), days(LEAP_DAY), 0)), Stale()),
        (envelope("c", 205, order(12, "eve", "!!", days(MARCH_1), 0)),
         Dead("column 'amount': expected DECIMAL(12,2) as base64 of its unscaled bytes, got string '!!'")),
    ],
    [
        (envelope("d", 300, before={"id": 4}, fields=None), Delete(4)),
        (envelope("d", 301, before={"id": 10, **PLACEHOLDERS}), Delete(10)),  # cy's last order: cy's row goes
        (envelope("u", 302, order(5, "dee", unscaled(-10), days(MARCH_1), micros(time(23, 59, 59, 999999)), unscaled(-BIG_UNSCALED))),
         Upsert(5, ("dee", Decimal("-0.10"), MARCH_1, "23:59:59.999999", BIG.copy_negate()))),
        # the day before the epoch, the last microsecond of a day, a zero amount
        (envelope("c", 303, order(13, "ann", unscaled(0), -1, 86_399_999_999)),
         Upsert(13, ("ann", Decimal("0.00"), date(1969, 12, 31), "23:59:59.999999", None))),
    ],
]


def apply_round(model: dict[int, Row], round_lines: list[tuple[str, Any]]) -> list[str]:
    """The model after a round; returns the round's dead-letter reasons."""
    reasons = []
    for _, effect in round_lines:
        if isinstance(effect, Upsert):
            model[effect.id] = effect.row
        elif isinstance(effect, Delete):
            del model[effect.id]
        elif isinstance(effect, Dead):
            reasons.append(effect.reason)
    return reasons


def expected_view(name: str, model: dict[int, Row]) -> list[tuple]:
    """The view's rows computed in Python from the model (SQL's aggregates: NULLs ignored)."""
    groups: dict[tuple, list[Row]] = {}
    for row in model.values():
        key = (row[0],) if name == "by_customer" else (row[2], row[1])
        groups.setdefault(key, []).append(row)
    out = []
    for key, rows in groups.items():
        if name == "by_customer":
            out.append((*key, sum((r[1] for r in rows), Decimal(0)), max(r[2] for r in rows), min(r[3] for r in rows), len(rows)))
        else:
            ledgers = [r[4] for r in rows if r[4] is not None]
            out.append((*key, len(rows), min(r[3] for r in rows), max(ledgers) if ledgers else None))
    return sorted(out, key=repr)


def sorted_rows(rows: Iterable) -> list[tuple]:
    return sorted((tuple(r) for r in rows), key=repr)


# ---- the test ---------------------------------------------------------------------------------------------
MODES = {
    # scans of the Iceberg tables and Spark MERGEs
    "scan": {"local_state": False, "direct_writes": False},
    # the local state (SQLite) and direct commits, the default; its last round is parsed set-wise by
    # Spark (lakemv.spark.bulk), where typed lines fall back to Python and a bare delete is parsed by the SQL
    "state": {"local_state": True, "direct_writes": True},
}
SET_WISE = {"bulk_min_bytes": 1}


@pytest.mark.parametrize("mode", list(MODES))
def test_decimal_date_and_time_from_envelopes_to_mirror_views_and_duckdb(lake, tmp_path, mode, monkeypatch):
    monkeypatch.setattr(choice, "PRIORS", choice.ALWAYS_INCREMENTAL)  # the path under test, however cold batches measure
    plans = [plan_view(parse_view(sql, name), SOURCES) for name, sql in VIEWS.items()]
    landing = tmp_path / "landing"
    (landing / "orders").mkdir(parents=True)
    model: dict[int, Row] = {}
    verbatim = lake.spark.newSession()  # `orders` as a temp view of its own: the views' SQL as written
    for number, round_lines in enumerate(ROUNDS):
        (landing / "orders" / f"round-{number}.json").write_text("".join(line + "\n" for line, _ in round_lines))
        set_wise = mode == "state" and number == len(ROUNDS) - 1
        settings = lake.settings.model_copy(update={**MODES[mode], **(SET_WISE if set_wise else {})})
        result = run_ingest(lake.spark, settings, SOURCES, landing, once=True, views=plans)
        reasons = apply_round(model, round_lines)
        (batch,) = result.batches
        assert (batch.set_wise, batch.dead_letters, batch.events) == (set_wise, len(reasons), len(round_lines) - len(reasons))
        for view in batch.views.values():  # maintained incrementally: from the local state, or by scans
            assert view.keys and "recomputed in full" not in (view.note or ""), view
            assert (view.rows_read is not None) == (mode == "state"), view
        assert sorted(batch.views) == sorted(VIEWS)
        assert_dead_letters(lake, number, reasons)
        assert_mirror(lake, model)
        assert_views(lake, verbatim, plans, model)
    assert_tombstones(lake, deleted={3, 4, 10})
    assert_duckdb(settings, plans, model)


def assert_dead_letters(lake, batch: int, reasons: list[str]) -> None:
    letters = lake.spark.sql(
        f"SELECT source_table, reason, raw FROM {lake.names.dead_letters} WHERE batch_id = {batch}"
    ).collect()
    assert sorted(r.reason for r in letters) == sorted(reasons), batch
    assert {r.source_table for r in letters} <= {"orders"}
    assert all(json.loads(r.raw) for r in letters)  # the raw line is kept whole


def assert_mirror(lake, model: dict[int, Row]) -> None:
    table = lake.names.mirror("orders")
    types = {f.name: f.dataType for f in lake.spark.table(table).schema.fields}
    assert (types["id"], types["amount"], types["placed_on"], types["placed_at"], types["ledger"]) == (
        LongType(), DecimalType(12, 2), DateType(), StringType(), DecimalType(38, 4)
    )
    rows = lake.spark.sql(live_rows_sql(lake.names, ORDERS)).collect()
    got = {r.id: (r.customer, r.amount, r.placed_on, r.placed_at, r.ledger) for r in rows}
    assert got == model
    # exact and of the declared scale, not only numerically equal
    assert {i: (str(r[1]), None if r[4] is None else str(r[4])) for i, r in got.items()} == {
        i: (str(r[1]), None if r[4] is None else str(r[4])) for i, r in model.items()
    }
    assert all(type(r[2]) is date and len(r[3]) == 15 for r in got.values())


def assert_views(lake, verbatim, plans, model: dict[int, Row]) -> None:
    # the same SQL over the mirror's live rows (a full recompute), in a session where `orders` is them
    verbatim.createDataFrame(lake.spark.sql(live_rows_sql(lake.names, ORDERS)).toArrow()).createOrReplaceTempView("orders")
    for plan in plans:
        frame = lake.spark.table(lake.names.view(plan.name))
        actual = sorted_rows(frame.select(*plan.columns).collect())
        recomputed = sorted_rows(verbatim.sql(plan.definition.sql).select(*plan.columns).collect())
        expected = expected_view(plan.name, model)
        assert actual == recomputed == expected, plan.name
        assert [str(v) for r in actual for v in r if isinstance(v, Decimal)] == [
            str(v) for r in expected for v in r if isinstance(v, Decimal)
        ], plan.name  # exact sums, of the declared scale
        types = {f.name: f.dataType for f in frame.schema.fields}
        if plan.name == "by_customer":
            assert (types["total"], types["last_day"], types["first_time"]) == (DecimalType(22, 2), DateType(), StringType())
        else:
            assert (types["placed_on"], types["amount"], types["top_ledger"]) == (DateType(), DecimalType(12, 2), DecimalType(38, 4))


def assert_tombstones(lake, deleted: set[int]) -> None:
    """Deleted rows stay as tombstones holding the key only: a delete's placeholders are never stored."""
    rows = lake.spark.sql(f"SELECT * FROM {lake.names.mirror('orders')} WHERE {DELETED}").collect()
    assert {r.id for r in rows} == deleted
    assert all((r.customer, r.amount, r.placed_on, r.placed_at, r.ledger) == (None,) * 5 for r in rows)


def assert_duckdb(settings, plans, model: dict[int, Row]) -> None:
    # the Iceberg tables as DuckDB's iceberg extension reads them: the declared types intact
    con = connect_duckdb()
    try:
        def described(namespace: str, table: str) -> dict[str, str]:
            location = metadata_location(settings, namespace, table)
            return {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT * FROM iceberg_scan('{location}')").fetchall()}

        mirror = described(MIRROR_NAMESPACE, "orders")
        assert (mirror["amount"], mirror["placed_on"], mirror["placed_at"], mirror["ledger"]) == (
            "DECIMAL(12,2)", "DATE", "VARCHAR", "DECIMAL(38,4)"
        )
        view = described(VIEW_NAMESPACE, "by_customer")
        assert (view["total"], view["last_day"], view["first_time"]) == ("DECIMAL(22,2)", "DATE", "VARCHAR")
    finally:
        con.close()
    # the mirror's live rows as `lakemv query` reads them, the time text cast to TIME
    table = run_query(
        settings, SOURCES, "SELECT id, customer, amount, placed_on, CAST(placed_at AS TIME) AS placed_at, ledger FROM orders"
    )
    assert [table.schema.field(c).type for c in ("amount", "placed_on", "placed_at", "ledger")] == [
        pa.decimal128(12, 2), pa.date32(), pa.time64("us"), pa.decimal128(38, 4)
    ]
    got = {r["id"]: (r["customer"], r["amount"], r["placed_on"], r["placed_at"], r["ledger"]) for r in table.to_pylist()}
    assert got == {i: (c, a, d, time.fromisoformat(t), l) for i, (c, a, d, t, l) in model.items()}
    # the view as DuckDB reads it equals DuckDB's own aggregation over the mirror, and the model
    con = lake_connection(settings, SOURCES)
    try:
        view = con.execute("SELECT customer, total, last_day, first_time, orders FROM by_customer").to_arrow_table()
        assert (view.schema.field("total").type, view.schema.field("last_day").type) == (pa.decimal128(22, 2), pa.date32())
        own = con.execute(
            "SELECT customer, sum(amount) AS total, max(placed_on) AS last_day, min(placed_at) AS first_time, count(*) AS orders "
            "FROM orders GROUP BY customer"
        ).fetchall()
        expected = expected_view("by_customer", model)
        assert sorted_rows(tuple(r.values()) for r in view.to_pylist()) == sorted_rows(own) == expected
        earliest = con.execute("SELECT min(CAST(first_time AS TIME)), max(CAST(first_time AS TIME)) FROM by_customer").fetchone()
        assert earliest == (min(time.fromisoformat(r[3]) for r in expected), max(time.fromisoformat(r[3]) for r in expected))
    finally:
        con.close()
    for plan in plans:  # `lakemv verify`: DuckDB recomputes each view from the mirror on its own and diffs it by key
        verified = verify_view(settings, SOURCES, plan.name, plan.definition.sql, plan.key_names)
        assert verified.ok and verified.matching == len(expected_view(plan.name, model)), verified.summary()
