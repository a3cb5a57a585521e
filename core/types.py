"""Every per-type fact, once: what each declared column type is in Arrow, Spark, DuckDB and PostgreSQL,
how Debezium spells it on the wire, and which Connect logical types mean which encoding.

The rest of lakemv derives its maps from these: the mirrors' DDL and Arrow schemas
(`lakemv.catalog.declarations`, `lakemv.catalog.tables`), schema drift's inverse
(`lakemv.core.cdc.evolution`), decoding by Connect schema (`lakemv.core.cdc.envelope`), the set-wise
parse (`lakemv.core.cdc.envelopesql`), value ranges (`lakemv.core.cdc.coerce`), and the workloads'
PostgreSQL tables and Debezium envelopes (`lakemv.workload`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa

UTC_MICROS = pa.timestamp("us", tz="UTC")
# A time of day is kept as its fixed-width text HH:MM:SS.ffffff: Spark 4.1 cannot keep TIME in an
# Iceberg table ("Not a supported type: time(6)"). The text sorts and compares as time does; the
# column's comment says what it holds, so schema drift reads it back as a time.
TIME_COMMENT = "lakemv:time"


@dataclass(frozen=True)
class TypeFacts:
    """One declared column type (decimals take their precision and scale from the declaration)."""

    arrow: pa.DataType | None  # None: a decimal (its Arrow type has the declared precision)
    postgres: str  # the PostgreSQL type whose Debezium encoding is the declared default
    connect: str  # the Connect schema type Debezium sends it as, by default
    # the JSON kinds the set-wise parse accepts, as lakemv_json_kinds spells them (S string, I integer, D an
    # integer beyond 64 bits, F a number with a fraction or exponent, B boolean); empty: the driver's alone
    json_kinds: str = ""


TYPES: Mapping[str, TypeFacts] = {
    "string": TypeFacts(pa.string(), "text", "string", "S"),
    "bigint": TypeFacts(pa.int64(), "bigint", "int64", "I"),
    "int": TypeFacts(pa.int32(), "integer", "int32", "I"),
    "double": TypeFacts(pa.float64(), "double precision", "double", "IDF"),
    "boolean": TypeFacts(pa.bool_(), "boolean", "boolean", "B"),
    "timestamp": TypeFacts(UTC_MICROS, "timestamp(6)", "int64", "IS"),
    "date": TypeFacts(pa.date32(), "date", "int32", "I"),
    "time": TypeFacts(pa.string(), "time(6)", "int64"),
    "decimal": TypeFacts(None, "numeric", "bytes"),
}

# What Debezium sends for a (type, encoding): the Connect type, its logical name, and the PostgreSQL
# type that makes Debezium send it so.
WIRE: Mapping[tuple[str, str], tuple[str, str, str]] = {
    ("timestamp", "micros"): ("int64", "io.debezium.time.MicroTimestamp", "timestamp(6)"),
    ("timestamp", "millis"): ("int64", "io.debezium.time.Timestamp", "timestamp(3)"),
    ("timestamp", "nanos"): ("int64", "io.debezium.time.NanoTimestamp", "timestamp(6)"),
    ("timestamp", "iso"): ("string", "io.debezium.time.ZonedTimestamp", "timestamptz"),
    ("date", "days"): ("int32", "io.debezium.time.Date", "date"),
}

# Connect logical types -> the declared type and the encoding they mean.
LOGICAL: Mapping[str, tuple[str, str]] = {
    "io.debezium.time.MicroTimestamp": ("timestamp", "micros"),
    "io.debezium.time.Timestamp": ("timestamp", "millis"),
    "io.debezium.time.NanoTimestamp": ("timestamp", "nanos"),
    "io.debezium.time.ZonedTimestamp": ("timestamp", "iso"),
    "org.apache.kafka.connect.data.Timestamp": ("timestamp", "millis"),
    "io.debezium.time.Date": ("date", "days"),
    "org.apache.kafka.connect.data.Date": ("date", "days"),
    "io.debezium.time.MicroTime": ("time", "micros"),
    "io.debezium.time.Time": ("time", "millis"),
    "io.debezium.time.NanoTime": ("time", "nanos"),
    "io.debezium.time.ZonedTime": ("time", "iso"),
    "org.apache.kafka.connect.data.Time": ("time", "millis"),
    "org.apache.kafka.connect.data.Decimal": ("decimal", "base64"),
    # time.precision.mode=isostring (Debezium 3.1+): ISO-8601 text, decoded by the driver only
    "io.debezium.time.IsoTimestamp": ("timestamp", "iso"),
    "io.debezium.time.IsoDate": ("date", "iso"),
    "io.debezium.time.IsoTime": ("time", "iso"),
}
DRIVER_ONLY_LOGICAL = ("io.debezium.time.IsoTimestamp", "io.debezium.time.IsoDate", "io.debezium.time.IsoTime")


def arrow_type(kind: str) -> pa.DataType:
    """The Arrow type of a declared column kind (`bigint`, `decimal(12,2)`, ...)."""
    if kind.startswith("decimal("):
        precision, scale = (int(part) for part in kind[len("decimal(") : -1].split(","))
        return pa.decimal128(precision, scale)
    arrow = TYPES[kind].arrow
    assert arrow is not None, kind
    return arrow


def int_range(kind: str) -> tuple[int, int] | None:
    """The values an integer type holds, or None for another type."""
    arrow = TYPES[kind].arrow if kind in TYPES else None
    if arrow is None or not pa.types.is_integer(arrow):
        return None
    bits = arrow.bit_width
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def column_type_of(spark_simple: str, comment: str | None) -> str | None:
    """The declared type of a mirror column Spark names `spark_simple` (`bigint`, `string`, ...), its
    comment saying whether a STRING holds times of day; None for a type no declaration has."""
    if comment == TIME_COMMENT:
        return "time"
    by_spark = {spark_ddl(f.arrow).lower(): name for name, f in TYPES.items() if f.arrow is not None and name != "time"}
    return by_spark.get(spark_simple)


_SIMPLE = {
    pa.string(): "STRING", pa.large_string(): "STRING", pa.int64(): "BIGINT", pa.int32(): "INT",
    pa.int16(): "SMALLINT", pa.int8(): "TINYINT", pa.float64(): "DOUBLE", pa.float32(): "FLOAT",
    pa.bool_(): "BOOLEAN", pa.date32(): "DATE", pa.binary(): "BINARY", pa.large_binary(): "BINARY",
}  # fmt: skip


def spark_ddl(t: pa.DataType) -> str:
    """Spark SQL's name of an Arrow type: BIGINT, DECIMAL(12,2), TIMESTAMP (with a zone; without one
    TIMESTAMP_NTZ), ARRAY<...>, STRUCT<name: TYPE, ...>."""
    if t in _SIMPLE:
        return _SIMPLE[t]
    if pa.types.is_timestamp(t):
        return "TIMESTAMP" if t.tz is not None else "TIMESTAMP_NTZ"
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"ARRAY<{spark_ddl(t.value_type)}>"
    if pa.types.is_struct(t):
        return "STRUCT<" + ", ".join(f"{f.name}: {spark_ddl(f.type)}" for f in t) + ">"
    raise TypeError(f"no Spark type for Arrow {t}")


def schema_ddl(schema: pa.Schema) -> str:
    """The column list of a CREATE TABLE for `schema`."""
    return ", ".join(f"{f.name} {spark_ddl(f.type)}" for f in schema)


def duckdb_type(t: pa.DataType) -> str:
    """DuckDB's name of an Arrow type (TIMESTAMPTZ for a zoned timestamp)."""
    if pa.types.is_timestamp(t):
        return "TIMESTAMPTZ" if t.tz is not None else "TIMESTAMP"
    if pa.types.is_list(t):
        return f"{duckdb_type(t.value_type)}[]"
    if pa.types.is_struct(t):
        return "STRUCT(" + ", ".join(f'"{f.name}" {duckdb_type(f.type)}' for f in t) + ")"
    return {"STRING": "VARCHAR", "BINARY": "BLOB"}.get(spark_ddl(t), spark_ddl(t))


def postgres_type(kind: str, encoding: str | None) -> str:
    """The PostgreSQL type that makes Debezium send a declared column as the declaration expects."""
    if (kind, encoding) in WIRE:
        return WIRE[(kind, encoding)][2]  # type: ignore[index]
    return TYPES[kind].postgres
