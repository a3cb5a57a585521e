"""How the engine state holds rows and keys, as SQL texts over its binary columns.

Encodings, the same on both sides of every read:
- a row (`v`) is the JSON of the table's row in its declared types, timestamps to the microsecond,
  plus the value of each key expression a view keys that table by (`derived_name`): the walks read
  columns and those values by name, the row parsed once a read;
- an entry's `a` (the looked-up values) and `b` (the primary key) are the JSON array of the values'
  texts, each number normalized to the type class of the space's column (a bigint asked of an int
  column finds its rows).
A read whose values hold a NULL where the link's equality is not null-safe asks nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakemv.catalog.declarations import SourceTable

JSON = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX", "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"}
ROW = "_lmv_row"  # the struct column of a table's row while it is packed
RAW = "RAW"  # a value compared by its text as it is (strings, times, a key expression's value)

_NORM = (
    "CASE WHEN t IN ('BIGINT', 'INT', 'SMALLINT', 'TINYINT') THEN CAST(CAST(x AS BIGINT) AS STRING) "
    "WHEN t IN ('DOUBLE', 'FLOAT') THEN CAST(CAST(x AS DOUBLE) AS STRING) "
    "WHEN t LIKE 'DECIMAL%' THEN CAST(CAST(x AS DECIMAL(38, 18)) AS STRING) ELSE x END"
)


def texts_of(values: str, types: str) -> str:
    """SQL: texts already read (`values`, an array) normalized by `types`."""
    return f"zip_with({values}, {types}, (x, t) -> {_NORM})"


def parsed(v: str) -> str:
    """SQL: a JSON row (`v`, bytes) as a map of its values' texts (a number's text as it is written)."""
    return f"from_json(CAST({v} AS STRING), 'MAP<STRING, STRING>')"


def texts_in(m: str, fields: str, types: str) -> str:
    """SQL: the normalized texts of a parsed row's values (`m`, see `parsed`; `fields`: their names,
    `types`: SQL array expressions; one expression for every hop)."""
    return texts_of(f"transform({fields}, f -> {m}[f])", types)


def texts(v: str, fields: str, types: str) -> str:
    """SQL: `texts_in` of a JSON row, parsed once."""
    return f"transform(array({parsed(v)}), m -> {texts_in('m', fields, types)})[0]"


def packed_texts(v: str, fields: str, types: str) -> str:
    """SQL: `texts` packed as bytes: an entry's `a` or `b`, a key's `k`."""
    return f"CAST(to_json({texts(v, fields, types)}) AS BINARY)"


def asked(values: str, strict: str) -> str:
    """SQL: the bytes that look `values` up, or NULL when one is NULL where `strict` (not null-safe)."""
    return f"CASE WHEN exists(zip_with({values}, {strict}, (x, s) -> x IS NULL AND s), b -> b) THEN NULL ELSE CAST(to_json({values}) AS BINARY) END"


def literal_array(values: Sequence[object], kind: str) -> str:
    if not values:
        return f"CAST(array() AS ARRAY<{kind}>)"
    rendered = [
        ("NULL" if v is None else ("true" if v else "false") if isinstance(v, bool) else "'" + str(v).replace("'", "\\'") + "'") for v in values
    ]
    return f"CAST(array({', '.join(rendered)}) AS ARRAY<{kind}>)"


def row_schema(source: SourceTable) -> str:
    return "STRUCT<" + ", ".join(f"`{c.name}`: {c.spark_type}" for c in source.columns) + ">"


def row_of(source: SourceTable, v: Column) -> Column:
    """An entry's `v` as the table's row (a struct; the key expressions' values are left out). Read
    without `JSON`'s patterns: Spark's default reading of a time is its ISO-8601 parser, which reads
    the texts those patterns write (to the microsecond) a fifth faster than a pattern does."""
    return F.from_json(v.cast("string"), row_schema(source))


def tag(*values: Column) -> Column:
    """Ints as a request's tag: their decimal texts joined by commas (split again far cheaper than JSON)."""
    return F.concat_ws(",", *[v.cast("string") for v in values]).cast("binary")


def untag(tag: Column, names: Sequence[str]) -> list[Column]:
    parts = F.split(tag.cast("string"), ",")
    return [parts[i].cast("int").alias(name) for i, name in enumerate(names)]


def untag_each(frame: DataFrame, names: Sequence[str], *keep: str) -> DataFrame:
    """`frame`'s rows (`tags`: an array of `tag`s, a grouped lookup's) one per tag, its ints as `names`,
    with the columns `keep` - computed before: once a row, however many tags it carries."""
    return frame.select(*keep, F.explode("tags").alias("t")).select(*untag(F.col("t"), names), *keep)


def position(rows: DataFrame) -> list[str]:
    """`_lmv_position` when `rows` has it (a change's source position), else nothing."""
    return ["_lmv_position"] if "_lmv_position" in rows.columns else []


def order(packed: DataFrame) -> Column:
    """An entry's order `s`: the row's source position, or null (unordered)."""
    return (F.col("_lmv_position") if "_lmv_position" in packed.columns else F.lit(None)).cast("bigint").alias("s")


def pk_fields(source: SourceTable) -> tuple[list[str], list[str]]:
    """The JSON fields of a table's primary key and their type classes."""
    return list(source.primary_key), [source.column(c).spark_type.upper() for c in source.primary_key]


def column_text(column: str, kind: str, raw: bool) -> str | None:
    """SQL: a column's value as the text a map parsed from the row's JSON gives it (`to_json` with
    `JSON`'s formats), or None for a type read only from the JSON (`kind`: Spark's simple type name).
    A fractional number's text may differ from JSON's: only a value normalized by its type (not `raw`)
    reads it off the column."""
    if kind == "string":
        return column
    if kind in ("tinyint", "smallint", "int", "bigint", "boolean", "date") or (
        not raw and (kind in ("float", "double") or kind.startswith("decimal"))
    ):
        return f"CAST({column} AS STRING)"
    if kind in ("timestamp", "timestamp_ntz"):
        pattern = JSON["timestampFormat" if kind == "timestamp" else "timestampNTZFormat"]
        return f'date_format({column}, "{pattern}")'
    return None


def pk_column_texts(source: SourceTable, row: str) -> str | None:
    """SQL: `pk_texts` read off the columns of `row` (a struct of the table's row) instead of its JSON:
    the same bytes, without parsing the JSON back (None: a key column of a type read only from the JSON)."""
    fields, types = pk_fields(source)
    texts = [column_text(f"{row}.`{name}`", source.column(name).spark_type.lower(), False) for name in fields]
    if any(t is None for t in texts):
        return None
    return f"CAST(to_json({texts_of('array(' + ', '.join(texts) + ')', literal_array(types, 'STRING'))}) AS BINARY)"  # type: ignore[arg-type]


def pk_texts(source: SourceTable, v: str = "v") -> str:
    """SQL: a packed row's primary key as the rows space keys it (`a`) and an index entry names it (`b`)."""
    fields, types = pk_fields(source)
    return packed_texts(v, literal_array(fields, "STRING"), literal_array(types, "STRING"))
