"""Real Debezium encodings of decimals, times and timestamps; their declarations; their PostgreSQL
types (pure Python, no JVM).

Envelopes are shaped as Debezium 3.6 (PostgreSQL connector, pgoutput, JsonConverter with
schemas.enable=true) writes them: numeric(12,2) as base64 of the big-endian two's-complement
unscaled integer with `org.apache.kafka.connect.data.Decimal` and its scale, time(6) as
`io.debezium.time.MicroTime`, timestamptz as `io.debezium.time.ZonedTimestamp` text, ...
"""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from typing import Any

import pytest

from lakemv.catalog.declarations import Column, SourceTable, parse_source
from lakemv.core.cdc.coerce import Wire, coerce
from lakemv.core.cdc.envelope import LOGICAL_TYPES, Change, Skip, field_wires, parse_envelope
from lakemv.core.errors import ConfigError, EnvelopeError
from lakemv.workload.postgres import create_table_sql, postgres_type

PAYMENTS = SourceTable.model_validate(
    {
        "name": "payments",
        "primary_key": ["id"],
        "columns": [
            {"name": "id", "type": "bigint"},
            {"name": "amount", "type": "decimal(12,2)"},
            {"name": "due", "type": "time"},
            {"name": "paid_at", "type": "timestamp", "encoding": "iso"},
            {"name": "note", "type": "string"},
        ],
    }
)
AMOUNT, DUE, PAID_AT = (PAYMENTS.column_names.index(n) for n in ("amount", "due", "paid_at"))

# Connect schemas of the fields, as Debezium's JsonConverter writes them.
ID = {"type": "int64", "optional": False, "default": 0, "field": "id"}
NOTE = {"type": "string", "optional": True, "field": "note"}


def decimal_field(name: str = "amount", scale: int | str = 2, precision: int = 12) -> dict[str, Any]:
    return {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1,
        "parameters": {"scale": str(scale), "connect.decimal.precision": str(precision)},
        "field": name,
    }


def logical(name: str, logical_name: str, kind: str = "int64") -> dict[str, Any]:
    return {"type": kind, "optional": True, "name": logical_name, "version": 1, "field": name}


SCHEMA_FIELDS = [
    ID,
    decimal_field(),
    logical("due", "io.debezium.time.MicroTime"),
    logical("paid_at", "io.debezium.time.ZonedTimestamp", "string"),
    NOTE,
]


def unscaled(number: int) -> str:
    """base64 of the big-endian two's-complement bytes of `number`, as Connect's Decimal sends it."""
    length = max(1, (number.bit_length() + 8) // 8)
    return base64.b64encode(number.to_bytes(length, "big", signed=True)).decode()


def envelope(op: str = "c", before: dict | None = None, after: dict | None = None, fields: list | None = SCHEMA_FIELDS, lsn: int = 26_445_688) -> str:
    """A Debezium data event; wrapped with a Connect schema describing `fields`, bare when fields is None."""
    payload = {
        "before": before,
        "after": after,
        "source": {
            "version": "3.6.3.Final",
            "connector": "postgresql",
            "name": "github",
            "ts_ms": 1_700_000_000_000,
            "db": "github",
            "schema": "public",
            "table": "payments",
            "txId": 728,
            "lsn": lsn,
        },
        "op": op,
        "ts_ms": 1_700_000_000_100,
        "transaction": {"id": "728:26445688", "total_order": 1, "data_collection_order": 1},
    }
    if fields is None:
        return json.dumps(payload)
    row = {"type": "struct", "fields": fields, "optional": True, "name": "github.public.payments.Value"}
    schema = {
        "type": "struct",
        "fields": [
            {**row, "field": "before"},
            {**row, "field": "after"},
            {"type": "struct", "fields": [], "optional": False, "name": "io.debezium.connector.postgresql.Source", "field": "source"},
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
        "optional": False,
        "name": "github.public.payments.Envelope",
        "version": 2,
    }
    return json.dumps({"schema": schema, "payload": payload})


def row(**values: Any) -> dict[str, Any]:
    return {"id": 1, "amount": None, "due": None, "paid_at": None, "note": None} | values


def parsed(after: dict, fields: list | None = SCHEMA_FIELDS) -> Change:
    change = parse_envelope(envelope(after=after, fields=fields), PAYMENTS)
    assert isinstance(change, Change)
    return change


# ---- the schema's wires ---------------------------------------------------------------------------------
def test_field_wires_read_logical_types_and_decimal_scale():
    schema = json.loads(envelope(after=row()))["schema"]
    assert field_wires(schema, "after") == {
        "amount": Wire("base64", 2),
        "due": Wire("micros"),
        "paid_at": Wire("iso"),
        "note": Wire("string"),
    }
    assert field_wires(schema, "before") == field_wires(schema, "after")
    assert field_wires({"type": "struct"}, "after") == {}
    assert field_wires(None, "after") == {}


@pytest.mark.parametrize(
    ("name", "encoding"),
    [
        ("io.debezium.time.MicroTime", "micros"),
        ("io.debezium.time.Time", "millis"),
        ("io.debezium.time.MicroTimestamp", "micros"),
        ("io.debezium.time.Timestamp", "millis"),
        ("io.debezium.time.ZonedTimestamp", "iso"),
        ("io.debezium.time.Date", "days"),
        ("org.apache.kafka.connect.data.Decimal", "base64"),
    ],
)
def test_measured_logical_types_map_to_encodings(name, encoding):
    assert LOGICAL_TYPES[name] == encoding


@pytest.mark.parametrize(
    ("mode", "name", "wire_value", "expected"),
    [  # time.precision.mode, as Debezium's PostgreSQL connector spells 2024-01-15 10:30:00.123456 (UTC) in each
        ("adaptive (timestamp(3))", "io.debezium.time.Timestamp", 1705314600123, 1705314600123000),
        ("adaptive", "io.debezium.time.MicroTimestamp", 1705314600123456, 1705314600123456),
        ("connect", "org.apache.kafka.connect.data.Timestamp", 1705314600123, 1705314600123000),
        ("nanoseconds", "io.debezium.time.NanoTimestamp", 1705314600123456000, 1705314600123456),
        ("isostring", "io.debezium.time.IsoTimestamp", "2024-01-15T10:30:00.123456Z", 1705314600123456),
    ],
)
def test_every_time_precision_mode_gives_the_same_instant(mode, name, wire_value, expected):
    from lakemv.catalog.declarations import Column

    column = Column(name="at", type="timestamp", encoding="millis")
    parameters = {"type": "string" if isinstance(wire_value, str) else "int64", "field": "at", "name": name}
    schema = {"type": "struct", "fields": [{"type": "struct", "field": "after", "fields": [parameters]}]}
    wire = field_wires(schema, "after")["at"]
    assert coerce(column, wire_value, wire) == expected, mode
    assert wire.type == "timestamp"  # a new column of this kind is typed by it (schema drift)
    days = field_wires({"type": "struct", "fields": [{"type": "struct", "field": "after", "fields": [
        {"type": "string", "field": "d", "name": "io.debezium.time.IsoDate"}]}]}, "after")["d"]  # fmt: skip
    assert coerce(Column(name="d", type="date"), "2024-01-15Z", days) == 19737 and days.type == "date"


# ---- decimals -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        ("AeJA", Decimal("1234.56")),  # 123456
        ("/h3A", Decimal("-1234.56")),  # -123456
        ("AA==", Decimal("0.00")),
        ("AQ==", Decimal("0.01")),
        ("/w==", Decimal("-0.01")),
        ("AIA=", Decimal("1.28")),  # 128 needs a leading zero byte to stay positive
        (unscaled(999_999_999_999), Decimal("9999999999.99")),  # the largest numeric(12,2)
        (unscaled(-999_999_999_999), Decimal("-9999999999.99")),
    ],
)
def test_decimal_base64_with_the_schemas_scale(wire, expected):
    value = parsed(row(amount=wire)).row[AMOUNT]
    assert value == expected
    assert value.as_tuple().exponent == -2  # the declared scale


def test_unscaled_helper_matches_debezium_bytes():
    assert unscaled(123456) == "AeJA" and unscaled(-123456) == "/h3A" and unscaled(0) == "AA=="


@pytest.mark.parametrize(
    ("scale", "number", "expected"),
    [
        (3, 1_234_560, Decimal("1234.56")),  # more places on the wire, but zeros: exact
        (1, 12_345, Decimal("1234.50")),
        (0, 1234, Decimal("1234.00")),
        (0, -7, Decimal("-7.00")),
    ],
)
def test_schema_scale_differing_from_the_declared_one_gives_the_exact_value(scale, number, expected):
    value = parsed(row(amount=unscaled(number)), [ID, decimal_field(scale=scale)]).row[AMOUNT]
    assert value == expected and value.as_tuple().exponent == -2


def test_negative_schema_scale_is_honoured():
    """PostgreSQL 15+ numeric(p,-s) (Connect Decimal allows a negative scale): 123 at scale -2 is 12300."""
    fields = [ID, decimal_field(scale=-2, precision=5)]
    assert field_wires(json.loads(envelope(after=row(), fields=fields))["schema"], "after")["amount"] == Wire("base64", -2)
    assert parsed(row(amount=unscaled(123)), fields).row[AMOUNT] == Decimal("12300.00")


def test_schema_scale_with_more_places_than_declared_is_a_dead_letter():
    with pytest.raises(EnvelopeError, match=r"column 'amount': 1234\.567 has more than the 2 decimal places of DECIMAL\(12,2\)"):
        parsed(row(amount=unscaled(1_234_567)), [ID, decimal_field(scale=3)])


def test_each_line_is_read_by_its_own_schema_when_a_tables_schema_changes():
    """A table's lines mostly repeat one Connect schema (its wires are reused while they do): a line
    with another scale, then the first schema again, each decodes by the schema it carries."""
    scales = [2, 1, 2, 0, 0, 2]
    values = [parsed(row(amount=unscaled(12_345)), [ID, decimal_field(scale=scale)]).row[AMOUNT] for scale in scales]
    assert values == [Decimal("123.45"), Decimal("1234.50"), Decimal("123.45"), Decimal("12345.00"), Decimal("12345.00"), Decimal("123.45")]


def test_decimal_without_schema_uses_the_declared_scale():
    assert parsed(row(amount="AeJA"), fields=None).row[AMOUNT] == Decimal("1234.56")


def test_variable_scale_decimal_struct():
    """numeric without precision: Debezium's VariableScaleDecimal {scale, value}."""
    value = parsed(row(amount={"scale": 3, "value": unscaled(1_234_560)}), fields=None).row[AMOUNT]
    assert value == Decimal("1234.56")


@pytest.mark.parametrize(("text", "expected"), [("1234.56", "1234.56"), ("-0.5", "-0.50"), ("7", "7.00"), ("0", "0.00")])
def test_decimal_handling_mode_string(text, expected):
    string_field = {"type": "string", "optional": True, "field": "amount"}
    assert parsed(row(amount=text), [ID, string_field]).row[AMOUNT] == Decimal(expected)


def test_decimal_declared_as_string_without_schema():
    source = SourceTable.model_validate(
        {
            "name": "t",
            "primary_key": ["id"],
            "columns": [{"name": "id", "type": "bigint"}, {"name": "amount", "type": "decimal(12,2)", "encoding": "string"}],
        }
    )
    change = parse_envelope(envelope(after={"id": 1, "amount": "1234.56"}, fields=None), source)
    assert change.row == (1, Decimal("1234.56"))


@pytest.mark.parametrize(("number", "expected"), [(1234.56, "1234.56"), (7, "7.00"), (-0.5, "-0.50"), (0, "0.00")])
def test_decimal_as_json_number_without_schema(number, expected):
    value = parsed(row(amount=number), fields=None).row[AMOUNT]
    assert value == Decimal(expected) and value.as_tuple().exponent == -2


@pytest.mark.parametrize(
    ("value", "fields"),
    [
        (unscaled(1_000_000_000_000), [ID, decimal_field()]),  # 10000000000.00: 13 digits
        ("12345678901.00", [ID, {"type": "string", "optional": True, "field": "amount"}]),
        (12_345_678_901, None),
    ],
)
def test_more_digits_than_the_precision_is_a_dead_letter(value, fields):
    with pytest.raises(EnvelopeError, match=r"column 'amount': .* has more digits than DECIMAL\(12,2\) holds"):
        parsed(row(amount=value), fields)


@pytest.mark.parametrize(
    ("value", "fields"),
    [
        (unscaled(10**40), [ID, decimal_field()]),  # a 41-digit unscaled integer
        ("1e30", [ID, {"type": "string", "optional": True, "field": "amount"}]),
        (10**30, None),
    ],
)
def test_far_too_large_decimal_is_a_dead_letter_not_a_crash(value, fields):
    """More than 28 significant digits (Python's default decimal context) must still be an
    EnvelopeError for the dead-letter table, not a decimal.InvalidOperation that fails the batch."""
    with pytest.raises(EnvelopeError, match=r"column 'amount'"):
        parsed(row(amount=value), fields)


def test_decimal_38_digits_decodes_exactly():
    """DECIMAL(38,2) is declarable (precision <= 38): its largest values must decode exactly."""
    wide = SourceTable.model_validate(
        {"name": "t", "primary_key": ["id"], "columns": [{"name": "id", "type": "bigint"}, {"name": "amount", "type": "decimal(38,2)"}]}
    )
    number = 10**38 - 1  # 999...9.99, 38 digits
    change = parse_envelope(envelope(after={"id": 1, "amount": unscaled(number)}, fields=[ID, decimal_field(scale=2, precision=38)]), wide)
    assert change.row == (1, Decimal("9" * 36 + ".99"))


@pytest.mark.parametrize("number", [10**37 - 1, -(2**63) - 1, 2**64])
def test_an_integer_beyond_64_bits_in_a_json_number_is_read_exactly(number):
    """The fast JSON reader takes such an integer for a float; the line is read exactly instead."""
    wide = SourceTable.model_validate(
        {"name": "t", "primary_key": ["id"], "columns": [{"name": "id", "type": "bigint"}, {"name": "amount", "type": "decimal(38,0)"}]}
    )
    change = parse_envelope(envelope(after={"id": 1, "amount": number}, fields=None), wide)
    assert change.row == (1, Decimal(number))


@pytest.mark.parametrize("value", ["not base64!", True, [1], "NaN"])
def test_malformed_decimals_are_dead_letters(value):
    with pytest.raises(EnvelopeError, match=r"column 'amount': expected DECIMAL\(12,2\)"):
        parsed(row(amount=value))


# ---- times of day ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        (logical("due", "io.debezium.time.MicroTime"), 45_296_123_456, "12:34:56.123456"),
        (logical("due", "io.debezium.time.MicroTime"), 0, "00:00:00.000000"),
        (logical("due", "io.debezium.time.MicroTime"), 86_399_999_999, "23:59:59.999999"),
        (logical("due", "io.debezium.time.Time", "int32"), 45_296_123, "12:34:56.123000"),
        (logical("due", "io.debezium.time.NanoTime"), 45_296_123_456_789, "12:34:56.123456"),
        (logical("due", "io.debezium.time.ZonedTime", "string"), "12:34:56.5Z", "12:34:56.500000"),
        (None, 45_296_123_456, "12:34:56.123456"),  # no schema: the declared default, micros
        (None, "12:34:56", "12:34:56.000000"),
        (None, "12:34:56.123456789", "12:34:56.123456"),
        (None, "07:05", "07:05:00.000000"),
    ],
)
def test_time_canonical_text(field, value, expected):
    fields = [ID, field] if field is not None else None
    assert parsed(row(due=value), fields).row[DUE] == expected


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (logical("due", "io.debezium.time.MicroTime"), 86_400_000_001),  # just after 24:00:00
        (logical("due", "io.debezium.time.MicroTime"), -1),
        (logical("due", "io.debezium.time.Time", "int32"), 86_400_001),
        (None, 10**12),
    ],
)
def test_time_outside_one_day_is_a_dead_letter(field, value):
    fields = [ID, field] if field is not None else None
    with pytest.raises(EnvelopeError, match="column 'due': time .* is outside one day"):
        parsed(row(due=value), fields)


@pytest.mark.parametrize("value", [86_400_000_000, "24:00:00", "24:00"])
def test_postgresql_end_of_day_time_is_kept(value):
    """PostgreSQL's `time` allows 24:00:00 itself (the end of a day): it sorts after 23:59:59.999999."""
    assert parsed(row(due=value), [ID, logical("due", "io.debezium.time.MicroTime")] if isinstance(value, int) else None).row[DUE] == "24:00:00.000000"


@pytest.mark.parametrize("value", ["noon", "25:00:00", True, 1.5])
def test_malformed_times_are_dead_letters(value):
    with pytest.raises(EnvelopeError, match="column 'due': expected TIME"):
        parsed(row(due=value))


def test_time_texts_sort_as_times():
    values = [0, 1, 999_999, 1_000_000, 59_999_999, 3_600_000_000, 45_296_123_456, 86_399_999_999]
    texts = [parsed(row(due=v)).row[DUE] for v in values]
    assert texts == sorted(texts) and len({len(t) for t in texts}) == 1


# ---- timestamps: the schema wins over the declaration ---------------------------------------------------
def test_zoned_timestamp_text():
    assert parsed(row(paid_at="2023-11-14T22:13:20.123456Z")).row[PAID_AT] == 1_700_000_000_123_456


def test_iso_declared_column_with_micro_timestamp_schema_decodes_micros():
    fields = [ID, logical("paid_at", "io.debezium.time.MicroTimestamp")]
    assert parsed(row(paid_at=1_700_000_000_123_456), fields).row[PAID_AT] == 1_700_000_000_123_456


def test_iso_declared_column_with_millis_timestamp_schema_decodes_millis():
    fields = [ID, logical("paid_at", "io.debezium.time.Timestamp")]
    assert parsed(row(paid_at=1_700_000_000_123), fields).row[PAID_AT] == 1_700_000_000_123_000


def test_without_schema_the_declared_encoding_is_used():
    with pytest.raises(EnvelopeError, match="column 'paid_at': expected TIMESTAMP as an ISO-8601 string"):
        parsed(row(paid_at=1_700_000_000_123_456), fields=None)
    assert parsed(row(paid_at="2023-11-14T22:13:20.123456Z"), fields=None).row[PAID_AT] == 1_700_000_000_123_456


def test_schema_without_a_logical_name_leaves_the_declaration_in_force():
    fields = [ID, {"type": "int64", "optional": True, "field": "paid_at"}]
    with pytest.raises(EnvelopeError, match="expected TIMESTAMP as an ISO-8601 string"):
        parsed(row(paid_at=1_700_000_000_123_456), fields)


def test_micros_declared_column_with_millis_schema_and_date_days():
    source = SourceTable.model_validate(
        {
            "name": "t",
            "primary_key": ["id"],
            "columns": [
                {"name": "id", "type": "bigint"},
                {"name": "at", "type": "timestamp", "encoding": "micros"},
                {"name": "day", "type": "date"},
            ],
        }
    )
    fields = [ID, logical("at", "io.debezium.time.Timestamp"), logical("day", "io.debezium.time.Date", "int32")]
    change = parse_envelope(envelope(after={"id": 1, "at": 1_700_000_000_123, "day": 19_675}, fields=fields), source)
    assert change.row == (1, 1_700_000_000_123_000, 19_675)


# ---- deletes and primary-key changes --------------------------------------------------------------------
USERS = SourceTable.model_validate(
    {
        "name": "users",
        "primary_key": ["email"],
        "columns": [
            {"name": "id", "type": "bigint"},
            {"name": "email", "type": "string"},
            {"name": "username", "type": "string"},
            {"name": "registered_at", "type": "timestamp"},
            {"name": "balance", "type": "decimal(12,2)"},
            {"name": "wakes", "type": "time"},
        ],
    }
)
USER_FIELDS = [
    {"type": "int64", "optional": False, "field": "id"},
    {"type": "string", "optional": False, "field": "email"},
    {"type": "string", "optional": False, "field": "username"},
    logical("registered_at", "io.debezium.time.MicroTimestamp"),
    decimal_field("balance"),
    logical("wakes", "io.debezium.time.MicroTime"),
]


@pytest.mark.parametrize("fields", [USER_FIELDS, None])
def test_delete_with_placeholders_parses_to_the_key_only(fields):
    """Debezium puts "" / 0 placeholders in a delete's before for NOT NULL non-key columns, whatever
    their type: only the key is read."""
    before = {"id": "", "email": "user0000108@example.com", "username": "", "registered_at": "", "balance": "", "wakes": ""}
    change = parse_envelope(envelope("d", before=before, fields=fields), USERS)
    assert change == Change("users", "d", ("user0000108@example.com",), 26_445_688, 1_700_000_000_000, None)


def test_measured_delete_with_null_non_key_columns():
    before = {"id": None, "email": "user0000108@example.com", "username": None, "registered_at": None, "balance": None, "wakes": None}
    change = parse_envelope(envelope("d", before=before, fields=USER_FIELDS), USERS)
    assert change.is_delete and change.key == ("user0000108@example.com",) and change.row is None


def test_primary_key_change_is_delete_tombstone_create():
    old = {
        "id": 1,
        "email": "user0000001@example.com",
        "username": "user0000001",
        "registered_at": 1_700_000_000_934_912,
        "balance": "AeJA",
        "wakes": 25_200_000_000,
    }
    new = old | {"email": "moved0000009@example.org"}
    values = [
        envelope("d", before={k: (v if k == "email" else None) for k, v in old.items()}, fields=USER_FIELDS, lsn=100),
        None,  # the Kafka tombstone of the old key
        envelope("c", after=new, fields=USER_FIELDS, lsn=101),
    ]
    delete, tombstone, create = (parse_envelope(v, USERS) for v in values)
    assert delete.is_delete and delete.key == ("user0000001@example.com",)
    assert tombstone == Skip("tombstone (null value)")
    assert create.op == "c" and create.key == ("moved0000009@example.org",)
    assert create.row == (1, "moved0000009@example.org", "user0000001", 1_700_000_000_934_912, Decimal("1234.56"), "07:00:00.000000")
    assert create.position > delete.position


# ---- declarations ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("spelling", ["decimal(12,2)", "DECIMAL(12,2)", "decimal( 12 , 2 )"])
def test_decimal_declaration(spelling):
    column = Column.model_validate({"name": "amount", "type": spelling})
    assert column.type == "decimal"
    assert (column.precision, column.scale) == (12, 2)
    assert column.kind == "decimal(12,2)"
    assert column.spark_type == "DECIMAL(12,2)"
    assert column.wire_encoding == "base64"


def test_time_declaration():
    column = Column.model_validate({"name": "due", "type": "time"})
    assert column.kind == "time" and column.spark_type == "STRING" and column.wire_encoding == "micros"


def _declare(column: str) -> SourceTable:
    text = f'name = "t"\nprimary_key = ["id"]\ncolumns = [\n  {{ name = "id", type = "bigint" }},\n  {column},\n]\n'
    return parse_source(text, "sources/t.toml")


def test_decimal_declaration_from_toml():
    table = _declare('{ name = "amount", type = "decimal(12,2)" }')
    assert table.column("amount") == Column(name="amount", type="decimal", precision=12, scale=2)


@pytest.mark.parametrize(
    ("column", "message"),
    [
        ('{ name = "amount", type = "decimal" }', "column 'amount': a decimal needs its precision and scale, e.g. type = \"decimal(12,2)\""),
        ('{ name = "amount", type = "decimal(2,5)" }', "column 'amount': scale 5 is larger than precision 2"),
        ('{ name = "amount", type = "decimal(39,2)" }', "columns.1.precision: Input should be less than or equal to 38"),
        ('{ name = "amount", type = "decimal(0,0)" }', "columns.1.precision: Input should be greater than or equal to 1"),
        ('{ name = "n", type = "bigint", precision = 5 }', "column 'n': precision and scale apply to decimal columns only"),
        ('{ name = "due", type = "time", scale = 2 }', "column 'due': precision and scale apply to decimal columns only"),
        ('{ name = "at", type = "timestamp", encoding = "base64" }', "column 'at': encoding 'base64' does not apply to type timestamp"),
        ('{ name = "amount", type = "decimal(12,2)", encoding = "micros" }', "column 'amount': encoding 'micros' does not apply to type decimal"),
        ('{ name = "due", type = "time", encoding = "days" }', "column 'due': encoding 'days' does not apply to type time"),
    ],
)
def test_bad_declarations_are_config_errors(column, message):
    with pytest.raises(ConfigError) as info:
        _declare(column)
    assert str(info.value).startswith("sources/t.toml: columns.1")
    assert message in str(info.value)


# ---- PostgreSQL types -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("declared", "expected"),
    [
        ({"type": "decimal(12,2)"}, "numeric(12,2)"),
        ({"type": "decimal(38,0)"}, "numeric(38,0)"),
        ({"type": "time"}, "time(6)"),
        ({"type": "timestamp"}, "timestamp(6)"),
        ({"type": "timestamp", "encoding": "micros"}, "timestamp(6)"),
        ({"type": "timestamp", "encoding": "millis"}, "timestamp(3)"),
        ({"type": "timestamp", "encoding": "iso"}, "timestamptz"),
        ({"type": "date"}, "date"),
        ({"type": "string"}, "text"),
        ({"type": "bigint"}, "bigint"),
    ],
)
def test_postgres_type(declared, expected):
    assert postgres_type(Column.model_validate({"name": "c", **declared})) == expected


def test_create_table_sql_quotes_identifiers():
    source = SourceTable.model_validate(
        {
            "name": "pull_requests",
            "primary_key": ["repo", "index"],
            "unique": [["title", "index"]],
            "columns": [
                {"name": "repo", "type": "string"},
                {"name": "index", "type": "bigint"},
                {"name": "title", "type": "string"},
                {"name": "amount", "type": "decimal(12,2)"},
                {"name": "due", "type": "time"},
                {"name": "created_at", "type": "timestamp", "encoding": "iso"},
                {"name": "merged_at", "type": "timestamp", "encoding": "millis"},
            ],
        }
    )
    assert create_table_sql(source) == (
        'CREATE TABLE public."pull_requests" (\n'
        '  "repo" text NOT NULL,\n'
        '  "index" bigint NOT NULL,\n'
        '  "title" text,\n'
        '  "amount" numeric(12,2),\n'
        '  "due" time(6),\n'
        '  "created_at" timestamptz,\n'
        '  "merged_at" timestamp(3),\n'
        '  PRIMARY KEY ("repo", "index"),\n'
        '  UNIQUE ("title", "index")\n'
        ")"
    )


def test_a_new_field_is_typed_by_its_connect_schema_not_by_its_json():
    """Schema drift: an undeclared field whose schema names a logical type becomes a column of that type."""
    import base64

    from lakemv.catalog.declarations import parse_source
    from lakemv.core.cdc.envelope import parse_envelope
    from lakemv.core.cdc.evolution import infer_column

    source = parse_source('name = "orders"\nprimary_key = ["id"]\ncolumns = [{ name = "id", type = "bigint" }]', "orders.toml")
    fields = [
        {"type": "int64", "optional": False, "field": "id"},
        {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
         "parameters": {"scale": "2", "connect.decimal.precision": "10"}, "field": "amount"},
        {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "version": 1, "field": "paid_at"},
        {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1, "field": "due"},
        {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTime", "version": 1, "field": "slot"},
        {"type": "string", "optional": True, "field": "note"},
    ]  # fmt: skip
    schema = {"type": "struct", "fields": [{"type": "struct", "fields": fields, "optional": True, "field": "after"}]}
    after = {"id": 1, "amount": base64.b64encode((1250).to_bytes(2, "big", signed=True)).decode(), "paid_at": 1_700_000_000_000_000,
             "due": 19_700, "slot": 3_600_000_000, "note": "x"}  # fmt: skip
    change = parse_envelope(json.dumps({"schema": schema, "payload": {"op": "c", "after": after, "source": {"lsn": 5}}}), source)
    columns = {name: infer_column(name, sample) for name, sample in change.unknown}
    assert columns["amount"].kind == "decimal(10,2)"
    assert (columns["paid_at"].type, columns["paid_at"].wire_encoding) == ("timestamp", "micros")
    assert (columns["due"].type, columns["slot"].type, columns["note"].type) == ("date", "time", "string")


@pytest.mark.parametrize("text", ["1_000", "NaN", "Infinity", "0x10", "1,5", ""])
def test_decimal_text_must_be_a_plain_number(text):
    from lakemv.core.cdc.coerce import Wire, coerce

    with pytest.raises(EnvelopeError, match="expected DECIMAL"):
        coerce(Column(name="amount", type="decimal(12,2)"), text, Wire("string"))
