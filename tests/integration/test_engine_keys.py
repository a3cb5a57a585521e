"""A view row's key read off its columns (`lakemv.spark.engine.encoding.column_text`) packs to the same bytes as
the key parsed back from the row's JSON, the way `reach` packs the keys a change reaches: for every type
a key is read off the columns, compared by its type or by its text, null and odd values included."""

from __future__ import annotations

import datetime
import decimal

from chispa import assert_df_equality
from pyspark.sql import functions as F

from lakemv.spark.frames import local_frame
from lakemv.spark.engine.encoding import JSON, RAW, column_text, literal_array, packed_texts, pk_column_texts, pk_texts, texts_of

T = datetime.datetime(2024, 2, 1, 12, 30, 15, 123456, tzinfo=datetime.UTC)
COLUMNS = [
    ("s", "STRING", ["plain", 'quo"te', "back\\slash", "ünï ✓", "", None]),
    ("i", "INT", [0, -7, 2**31 - 1, None]),
    ("l", "BIGINT", [2**62, -1, None]),
    ("b", "BOOLEAN", [True, False, None]),
    ("d", "DATE", [datetime.date(2024, 2, 29), datetime.date(1, 1, 1), None]),
    ("t", "TIMESTAMP", [T, T.replace(microsecond=0), datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC), None]),
    ("n", "TIMESTAMP_NTZ", [T.replace(tzinfo=None), datetime.datetime(2000, 1, 1), None]),
    ("f", "DOUBLE", [0.1, 1e20, -0.0, 1 / 3, float("nan"), None]),
    ("g", "FLOAT", [0.1, 3.5, None]),
    ("m", "DECIMAL(12,4)", [decimal.Decimal("1.5000"), decimal.Decimal("0.0001"), decimal.Decimal("-12345678.1234"), None]),
]


def test_a_key_read_off_the_columns_packs_as_its_json_does(spark):
    width = max(len(values) for _, _, values in COLUMNS)
    rows = [tuple(values[i % len(values)] for _, _, values in COLUMNS) for i in range(width)]
    frame = local_frame(spark, rows, ", ".join(f"{name} {kind}" for name, kind, _ in COLUMNS))
    options = ", ".join(f"'{k}', \"{v}\"" for k, v in JSON.items())
    framed = frame.selectExpr("struct(*) AS r").selectExpr("r", f"to_json(r, map({options})) AS row")
    kinds = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
    compared = 0
    for name, kind, _ in COLUMNS:
        for types in (kind, RAW):
            read = column_text(f"r.`{name}`", kinds[name], types == RAW)
            if read is None:  # a fractional number compared by its text is read from the JSON only
                assert types == RAW and (kind in ("DOUBLE", "FLOAT") or kind.startswith("DECIMAL"))
                continue
            typed = literal_array([types], "STRING")
            both = framed.selectExpr(
                "row",
                f"CAST(to_json({texts_of(f'array({read})', typed)}) AS BINARY) AS columns",
                f"{packed_texts('row', literal_array([name], 'STRING'), typed)} AS json",
            ).collect()
            differ = [(r["row"], bytes(r["columns"]), bytes(r["json"])) for r in both if r["columns"] != r["json"]]
            assert not differ, f"{name} {kind} compared as {types}: {differ}"
            compared += 1
    assert compared == 17  # every type by its type, and all but the three fractional ones by their text too


def _every_declarable_type(spark, name: str, primary_key: tuple[str, ...] | None):
    """A source table of a column of each declarable type in COLUMNS (its key `primary_key`, None: every
    column), the rows that cycle through their values, as a frame, and how many rows."""
    from lakemv.catalog.declarations import Column, SourceTable
    from lakemv.spark.engine.encoding import row_schema

    declared = [(column, kind, values) for column, kind, values in COLUMNS if kind not in ("TIMESTAMP_NTZ", "FLOAT")]
    columns = tuple(Column(name=column, type=kind.lower()) for column, kind, _ in declared)
    source = SourceTable(name=name, primary_key=primary_key or tuple(c.name for c in columns), columns=columns)
    width = max(len(values) for _, _, values in declared)
    rows = [tuple(values[i % len(values)] for _, _, values in declared) for i in range(width)]
    return source, local_frame(spark, rows, row_schema(source)[len("STRUCT<") : -1].replace("`: ", "` ")), width


def test_a_row_packed_as_json_reads_back_as_the_row(spark):
    """`row_of` reads a packed row (`to_json` with `JSON`'s patterns: times to the microsecond) without
    those patterns, by Spark's ISO-8601 reading: every value of every declarable type comes back as it was."""
    from lakemv.spark.engine.encoding import row_of

    source, frame, _ = _every_declarable_type(spark, "every_type", ("s",))
    packed = frame.selectExpr("struct(*) AS r").select(F.to_json("r", JSON).cast("binary").alias("v"))
    back = packed.select(row_of(source, F.col("v")).alias("r")).select("r.*")
    assert_df_equality(back, frame, ignore_row_order=True, ignore_nullable=True, allow_nan_equality=True)


def test_a_primary_key_read_off_the_columns_packs_as_its_json_does(spark):
    """`pk_column_texts` (a changed row's key, read off its columns as `apply` writes it) is `pk_texts`
    of the row's JSON, byte for byte, for a key of every type read off the columns."""
    source, frame, width = _every_declarable_type(spark, "every_key", None)
    options = ", ".join(f"'{k}', \"{v}\"" for k, v in JSON.items())
    framed = frame.selectExpr("struct(*) AS r").selectExpr("r", f"CAST(to_json(r, map({options})) AS BINARY) AS v")
    off_columns = pk_column_texts(source, "r")
    assert off_columns is not None
    both = framed.selectExpr("v", f"{off_columns} AS columns", f"{pk_texts(source)} AS json").collect()
    assert [bytes(r["columns"]) for r in both] == [bytes(r["json"]) for r in both] and len(both) == width
