"""Debezium envelope parsing as Spark SQL, for large units: the same rules as `lakemv.core.cdc.envelope`. Pure.

`lakemv.core.cdc.envelope` parses one line at a time in the driver; a snapshot or a backlog of millions of
lines is parsed here instead, set-wise by Spark (`lakemv.spark.bulk` runs the SQL). Python stays the one
definition of the rules: the SQL only accepts a line when it can prove `parse_envelope` gives the
same change, typed the same way, and marks every other line `_lmv_clean = false`: malformed JSON, a
wrapper with a null payload, an unknown op, a missing image or key, a value of the wrong JSON type or
out of range, an ISO timestamp outside the strict form below, an image with fields the declaration
lacks or without some it declares, an over-long line. Those few go to `parse_envelope`, which turns
them into changes, skips or dead letters with their reasons, exactly as it always did.

JSON types are read through Spark's VARIANT: `schema_of_variant` of an after-image is one string,
e.g. `OBJECT<email: STRING, id: BIGINT, username: VOID>` (fields sorted, JSON null as VOID), matched
against one pattern per table that spells every declared column with the JSON types its declared
type accepts - so the type checks and "exactly the declared fields" are one regular expression.
Each value is then extracted once. The SQL carries no per-unit literal (batch id, time), so Spark's
compiled code is reused from unit to unit.
"""

from __future__ import annotations

import re

from lakemv.catalog.declarations import ENCODINGS, Column, SourceTable
from lakemv.catalog.tables import DELETED, OP, POSITION, SOURCE_TS
from lakemv.core.cdc.coerce import MAX_MICROS, MIN_MICROS
from lakemv.core.cdc.unavailable import SPELLINGS
from lakemv.core.sql.quote import q
from lakemv.core.types import DRIVER_ONLY_LOGICAL, LOGICAL, TYPES

CLEAN = "_lmv_clean"
SEQ = "_lmv_seq"  # the line's place in the unit: on equal positions the later line wins
# The one ISO-8601 form accepted set-wise: date, T or space, time, 1-9 fraction digits, Z or +hh:mm.
_ISO = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})?$"
_MICROS_PER = {"micros": 1, "millis": 1000}
_MIN_DAYS, _MAX_DAYS = -719162, 2932896


# Types only `parse_envelope` decodes (base64 decimals, times of day): their lines are never clean here.
_PYTHON_ONLY = tuple(name for name, facts in TYPES.items() if facts.json_kinds == ("NONE",))


def _kinds(column: Column) -> tuple[str, ...]:
    """The JSON kinds (schema_of_variant) a declared column accepts set-wise."""
    if column.type == "timestamp" and column.wire_encoding == "iso":
        return ("STRING",)
    return TYPES[column.type].json_kinds


# The Connect logical types each declared encoding is (lakemv.core.types.LOGICAL, inverted; isostring
# mode's names are decoded by the driver only).
_LOGICAL_NAMES = {
    (kind, encoding): tuple(n for n, k in LOGICAL.items() if k == (kind, encoding) and n not in DRIVER_ONLY_LOGICAL)
    for kind in ("timestamp", "date") for encoding in ENCODINGS[kind]
}


def _schema_agrees(column: Column) -> str:
    """SQL: the image's Connect schema gives `column` no logical type, or one meaning its declared encoding."""
    field = f"try_element_at(filter(image_fields, x -> try_variant_get(x, '$.field', 'string') = '{column.name}'), 1)"
    names = ", ".join(["''", *(f"'{n}'" for n in _LOGICAL_NAMES[(column.type, column.wire_encoding)])])  # type: ignore[index]
    return f"coalesce(try_variant_get({field}, '$.name', 'string'), '') IN ({names})"


def image_pattern(source: SourceTable) -> str:
    """The regular expression `schema_of_variant` of a clean after-image matches (SQL-escaped)."""
    fields = []
    for column in sorted(source.columns, key=lambda c: c.name):
        kinds = list(_kinds(column)) + ([] if column.name in source.primary_key else ["VOID"])
        fields.append(f"{re.escape(column.name)}: ({'|'.join(kinds)})")
    return "^OBJECT<" + ", ".join(fields) + ">$"


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _value(column: Column, raw: str) -> tuple[str, str]:
    """(typed value, extra check) for image field `raw` (a VARIANT column) whose JSON kind the image
    pattern already checked; the extra check covers ranges and the ISO form."""
    long = f"try_variant_get({raw}, '$', 'bigint')"
    if column.type in _PYTHON_ONLY:
        return f"CAST(NULL AS {column.spark_type})", "false"
    if column.type in ("string", "bigint", "boolean"):
        return f"try_variant_get({raw}, '$', '{column.type}')", "true"
    if column.type == "int":
        return f"try_cast({long} AS INT)", f"({long} IS NULL OR {long} BETWEEN {-(2**31)} AND {2**31 - 1})"
    if column.type == "double":
        value = f"try_variant_get({raw}, '$', 'double')"
        return value, f"({value} IS NULL OR (NOT isnan({value}) AND abs({value}) < double('Infinity')))"
    if column.type == "date":
        return f"date_from_unix_date(try_cast({long} AS INT))", f"({long} IS NULL OR {long} BETWEEN {_MIN_DAYS} AND {_MAX_DAYS})"
    micros = q(f"_lmv_us_{column.name}")  # computed in its own step (see `_micros`)
    return f"timestamp_micros({micros})", f"({raw} IS NULL OR is_variant_null({raw}) OR {micros} BETWEEN {MIN_MICROS} AND {MAX_MICROS})"


def _iso_steps(column: Column, raw: str) -> tuple[str, str, str]:
    """Three steps of SELECT items for a timestamp field, each naming what the next one reads once:
    its text, the text's parts (strict ISO form only), and its epoch micros - a number in the declared
    unit (floor division, as Python's `//`) or the ISO parts (offset applied, naive means UTC)."""
    name = column.name
    text, match, offset, micros = (q(f"_lmv_{k}_{name}") for k in ("text", "iso", "offset", "us"))
    first = (
        f"schema_of_variant({raw}) = 'BIGINT' AS {q(f'_lmv_num_{name}')}, try_variant_get({raw}, '$', 'bigint') AS {q(f'_lmv_long_{name}')}, "
        f"try_variant_get({raw}, '$', 'string') AS {text}"
    )
    second = (
        f"{text} RLIKE '{_ISO}' AS {match}, regexp_extract({text}, '(Z|[+-][0-9]{{2}}:[0-9]{{2}})$', 1) AS {offset}, "
        f"regexp_extract({text}, '\\\\.([0-9]+)', 1) AS {q(f'_lmv_frac_{name}')}"
    )
    long = q(f"_lmv_long_{name}")
    encoding = column.wire_encoding
    number = "CAST(NULL AS BIGINT)"
    if encoding == "nanos":
        number = f"(({long} - pmod({long}, 1000)) div 1000)"
    elif encoding in _MICROS_PER:
        per = _MICROS_PER[encoding]  # type: ignore[index]
        number = f"(CASE WHEN {long} BETWEEN {_ceil_div(MIN_MICROS, per)} AND {MAX_MICROS // per} THEN {long} * {per} END)"
    part = lambda start, length: f"try_cast(substr({text}, {start}, {length}) AS INT)"  # noqa: E731
    hours, minutes = f"try_cast(substr({offset}, 2, 2) AS BIGINT)", f"try_cast(substr({offset}, 5, 2) AS BIGINT)"
    offset_micros = (
        f"(CASE WHEN {offset} IN ('', 'Z') THEN 0 WHEN {hours} < 24 AND {minutes} < 60 THEN "
        f"(CASE WHEN substr({offset}, 1, 1) = '-' THEN -1 ELSE 1 END) * ({hours} * 3600 + {minutes} * 60) * 1000000 END)"
    )
    civil = f"try_make_timestamp({part(1, 4)}, {part(6, 2)}, {part(9, 2)}, {part(12, 2)}, {part(15, 2)}, {part(18, 2)}, 'UTC')"
    fraction = f"coalesce(try_cast(rpad(substr({q(f'_lmv_frac_{name}')}, 1, 6), 6, '0') AS BIGINT), 0)"
    iso = (
        f"CASE WHEN {match} AND {part(12, 2)} < 24 AND {part(15, 2)} < 60 AND {part(18, 2)} < 60 "
        f"THEN unix_micros({civil}) + {fraction} - {offset_micros} END"
    )
    third = f"CASE WHEN {q(f'_lmv_num_{name}')} THEN {number} ELSE {iso} END AS {micros}"
    return first, second, third


def parse_sql(source: SourceTable, relation: str, max_line_chars: int | None) -> str:
    """SELECT over `relation` (`value`, `file`, `_lmv_seq`: the landing lines of this source) giving
    the mirror row of every line (without the per-unit batch id and ingest time) plus `_lmv_clean`;
    the caller hands unclean lines to `parse_envelope`."""
    field = lambda c: q(f"_lmv_v_{c.name}")  # noqa: E731 - the image field of column c
    present = lambda e: f"({e} IS NOT NULL AND NOT is_variant_null({e}))"  # noqa: E731 - Python's `is not None`
    positions = [f"variant_get(e, '$.{p}')" for p in source.ordering]
    position = "CASE " + " ".join(f"WHEN {present(p)} THEN {p}" for p in positions) + " END"
    ts_paths = ["variant_get(e, '$.source.ts_ms')", "variant_get(e, '$.ts_ms')"]
    source_ts = "CASE " + " ".join(f"WHEN {present(p)} THEN {p}" for p in ts_paths) + " END"
    fields = ", ".join(f"variant_get(image, '$.{c.name}') AS {field(c)}" for c in source.columns)
    stamps = [c for c in source.columns if c.type == "timestamp"]
    steps = [_iso_steps(c, field(c)) for c in stamps]
    texts, parts, micros = ("".join(f", {s[i]}" for s in steps) for i in range(3))
    typed = {c.name: _value(c, field(c)) for c in source.columns}
    keys = " AND ".join(
        f"schema_of_variant({field(source.column(k))}) RLIKE '^({'|'.join(_kinds(source.column(k)))})$' AND {typed[k][1]}"
        for k in source.primary_key
    )
    checks = " AND ".join(check for _, check in typed.values() if check != "true") or "true"
    too_long = f"length(value) > {max_line_chars}" if max_line_chars is not None else "false"
    # Debezium's placeholder for an unavailable value as an image value (or an array's first element), in
    # any spelling: the line is the driver's (lakemv.core.cdc.unavailable), as is one that is not UTF-8 (its
    # dead letter says where). Read off the parsed image, not searched for in the line (a regex over every
    # line was the set-wise parse's largest cost); a placeholder elsewhere is never read.
    spellings = ", ".join(f"'{spelling}'" for spelling in sorted(SPELLINGS))
    placeholder = " OR ".join(
        f"coalesce(try_variant_get(image, '$.{c.name}{at}', 'string') IN ({spellings}), false)" for c in source.columns for at in ("", "[0]")
    )
    # A Connect schema may say a field is encoded otherwise than declared (lakemv.core.cdc.envelope.field_wires):
    # a wrapped line is clean only if its schema names, for each temporal column, no logical type or
    # one that means the declared encoding; decimals and times are Python's anyway.
    agreed = [_schema_agrees(c) for c in source.columns if c.type in ("timestamp", "date")]
    unwrapped_only = "(NOT wrapped OR (" + " AND ".join(agreed) + "))" if agreed else "true"
    columns = ", ".join(
        f"{value} AS {q(c.name)}" if c.name in source.primary_key else f"CASE WHEN NOT deleted THEN {value} END AS {q(c.name)}"
        for c, (value, _) in zip(source.columns, typed.values(), strict=True)
    )
    ts_millis = "try_variant_get(ts, '$', 'bigint')"
    return f"""
WITH unwrapped AS (
  SELECT value, file, {SEQ},
         variant_get(v, '$.payload') IS NOT NULL AND variant_get(v, '$.schema') IS NOT NULL AS wrapped,
         try_variant_get(v, '$.schema.fields', 'array<variant>') AS sfields,
         CASE WHEN variant_get(v, '$.payload') IS NOT NULL AND variant_get(v, '$.schema') IS NOT NULL
              THEN variant_get(v, '$.payload') ELSE v END AS e
  FROM (SELECT value, file, {SEQ}, try_parse_json(value) AS v FROM {relation})
), enveloped AS (
  SELECT value, file, {SEQ}, wrapped, e, op, op = 'd' AS deleted,
         try_variant_get(try_element_at(filter(sfields, f -> try_variant_get(f, '$.field', 'string') =
           CASE WHEN op = 'd' THEN 'before' ELSE 'after' END), 1), '$.fields', 'array<variant>') AS image_fields,
         CASE WHEN op = 'd' THEN variant_get(e, '$.before') ELSE variant_get(e, '$.after') END AS image,
         {position} AS pos, {source_ts} AS ts
  FROM (SELECT *, CASE WHEN schema_of_variant(variant_get(e, '$.op')) = 'STRING'
                       THEN try_variant_get(e, '$.op', 'string') END AS op FROM unwrapped)
), fielded AS (
  SELECT *, schema_of_variant(image) AS image_kind, {fields} FROM enveloped
), texted AS (
  SELECT *{texts} FROM fielded
), split AS (
  SELECT *{parts} FROM texted
), timed AS (
  SELECT *{micros} FROM split
)
SELECT {columns},
       try_variant_get(pos, '$', 'bigint') AS {q(POSITION)},
       op AS {q(OP)},
       deleted AS {q(DELETED)},
       timestamp_micros(CASE WHEN {ts_millis} BETWEEN 0 AND {MAX_MICROS // 1000} THEN {ts_millis} * 1000 END) AS {q(SOURCE_TS)},
       value, file, {SEQ},
       coalesce(
         NOT ({too_long})
         AND is_valid_utf8(value) AND NOT ({placeholder})
         AND NOT (op = 'r' AND try_variant_get(e, '$.source.snapshot', 'string') = 'incremental')
         AND {unwrapped_only}
         AND op IN ('c', 'r', 'u', 'd')
         AND schema_of_variant(pos) = 'BIGINT' AND try_variant_get(pos, '$', 'bigint') >= 0
         AND (ts IS NULL OR (schema_of_variant(ts) = 'BIGINT' AND {ts_millis} BETWEEN 0 AND {MAX_MICROS // 1000}))
         AND CASE WHEN deleted THEN image_kind LIKE 'OBJECT%' AND {keys}
                  ELSE image_kind RLIKE '{image_pattern(source)}' AND {checks} END,
         false) AS {q(CLEAN)}
FROM timed
"""
