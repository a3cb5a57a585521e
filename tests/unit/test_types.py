"""The one table of per-type facts (lakemv.core.types) agrees with the declarations and renders every
engine's types."""

from __future__ import annotations

from typing import get_args

import pyarrow as pa

from lakemv.catalog.declarations import ENCODINGS, Column, ColumnType
from lakemv.core.cdc.envelope import LOGICAL_TYPES
from lakemv.core.types import (
    LOGICAL,
    TIME_COMMENT,
    TYPES,
    WIRE,
    arrow_type,
    column_type_of,
    duckdb_type,
    int_range,
    postgres_type,
    spark_ddl,
)


def test_every_declared_type_has_its_facts_and_every_encoding_its_meaning():
    assert set(get_args(ColumnType)) == set(TYPES)
    for (kind, encoding) in WIRE:
        assert encoding in ENCODINGS[kind]
    assert {encoding for _, encoding in LOGICAL.values()} <= {e for es in ENCODINGS.values() for e in es}
    assert LOGICAL_TYPES["io.debezium.time.Timestamp"] == "millis"


def test_each_type_in_each_engine():
    cases = {
        "string": ("STRING", "VARCHAR", "text"), "bigint": ("BIGINT", "BIGINT", "bigint"), "int": ("INT", "INT", "integer"),
        "double": ("DOUBLE", "DOUBLE", "double precision"), "boolean": ("BOOLEAN", "BOOLEAN", "boolean"),
        "timestamp": ("TIMESTAMP", "TIMESTAMPTZ", "timestamp(6)"), "date": ("DATE", "DATE", "date"), "time": ("STRING", "VARCHAR", "time(6)"),
    }  # fmt: skip
    for kind, (spark, duck, postgres) in cases.items():
        assert (spark_ddl(arrow_type(kind)), duckdb_type(arrow_type(kind)), postgres_type(kind, None)) == (spark, duck, postgres), kind
    assert spark_ddl(arrow_type("decimal(12,2)")) == "DECIMAL(12,2)" == Column(name="a", type="decimal(12,2)").spark_type
    assert postgres_type("timestamp", "millis") == "timestamp(3)" and postgres_type("timestamp", "iso") == "timestamptz"
    assert spark_ddl(pa.list_(pa.struct([("n", pa.int64())]))) == "ARRAY<STRUCT<n: BIGINT>>"


def test_schema_drift_reads_a_mirror_column_back_as_its_declared_type():
    for kind in TYPES:
        if kind not in ("time", "decimal"):
            assert column_type_of(spark_ddl(arrow_type(kind)).lower(), None) == kind
    assert column_type_of("string", TIME_COMMENT) == "time" and column_type_of("map<string,string>", None) is None


def test_integer_ranges_come_from_the_storage_type():
    assert int_range("int") == (-(2**31), 2**31 - 1) and int_range("bigint") == (-(2**63), 2**63 - 1) and int_range("double") is None
