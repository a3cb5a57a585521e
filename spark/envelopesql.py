"""Debezium envelope parsing as Spark SQL, for large units: the same rules as `spark.envelope`. Pure.

`spark.envelope` parses one line at a time in the driver; a snapshot or a backlog of millions of
lines is parsed here instead, set-wise by Spark (`spark.bulk` runs the SQL). Python stays the one
definition of the rules: the SQL only accepts a line when it can prove `parse_envelope` gives the
same change, typed the same way (JSON token types checked through Spark's VARIANT), and marks every
other line `_lmv_clean = false`: malformed JSON, a wrapper with a null payload, an unknown op, a
missing image or key, a value of the wrong JSON type or out of range, an ISO timestamp outside the
strict form below, an image with fields the declaration lacks or without some it declares, an
over-long line. Those few go to `parse_envelope`, which turns them into changes, skips or dead
letters with their reasons, exactly as it always did.
"""

from __future__ import annotations

from catalog.declarations import Column, SourceTable
from catalog.tables import BATCH_ID, DELETED, INGESTED_AT, OP, POSITION, SOURCE_TS
from spark.coerce import MAX_MICROS, MIN_MICROS
from spark.literals import q

CLEAN = "_lmv_clean"
SEQ = "_lmv_seq"  # the line's place in the unit: on equal positions the later line wins
_INT = "'BIGINT'"  # schema_of_variant of every JSON integer that fits 64 bits
# The one ISO-8601 form accepted set-wise: date, T or space, time, 1-9 fraction digits, Z or +hh:mm.
_ISO = "^([0-9]{4})-([0-9]{2})-([0-9]{2})[T ]([0-9]{2}):([0-9]{2}):([0-9]{2})(\\\\.([0-9]{1,9}))?(Z|[+-][0-9]{2}:[0-9]{2})?$"
_MICROS_PER = {"micros": 1, "millis": 1000}
_MIN_DAYS, _MAX_DAYS = -719162, 2932896


def _path(dotted: str) -> str:
    return "'$." + dotted + "'"


def _present(expr: str) -> str:
    """A JSON field that is there and not null (Python's `value is None` is false)."""
    return f"({expr} IS NOT NULL AND NOT is_variant_null({expr}))"


def _kind(expr: str) -> str:
    return f"schema_of_variant({expr})"


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _value(column: Column, raw: str) -> tuple[str, str]:
    """(typed value, ok) SQL for one image field `raw` (a VARIANT, NULL when the field is absent)."""
    kind, null = _kind(raw), f"NOT {_present(raw)}"
    as_long = f"try_variant_get({raw}, '$', 'bigint')"
    if column.type == "string":
        return f"CASE WHEN {kind} = 'STRING' THEN try_variant_get({raw}, '$', 'string') END", f"({null} OR {kind} = 'STRING')"
    if column.type == "bigint":
        return f"CASE WHEN {kind} = {_INT} THEN {as_long} END", f"({null} OR {kind} = {_INT})"
    if column.type == "int":
        fits = f"({kind} = {_INT} AND {as_long} BETWEEN {-(2**31)} AND {2**31 - 1})"
        return f"CASE WHEN {fits} THEN try_cast({as_long} AS INT) END", f"({null} OR {fits})"
    if column.type == "double":
        number = f"({kind} IN ({_INT}, 'DOUBLE', 'FLOAT') OR {kind} LIKE 'DECIMAL(%')"
        value = f"try_variant_get({raw}, '$', 'double')"
        finite = f"({number} AND NOT isnan({value}) AND abs({value}) < double('Infinity'))"
        return f"CASE WHEN {finite} THEN {value} END", f"({null} OR {finite})"
    if column.type == "boolean":
        return f"CASE WHEN {kind} = 'BOOLEAN' THEN try_variant_get({raw}, '$', 'boolean') END", f"({null} OR {kind} = 'BOOLEAN')"
    if column.type == "date":
        fits = f"({kind} = {_INT} AND {as_long} BETWEEN {_MIN_DAYS} AND {_MAX_DAYS})"
        return f"CASE WHEN {fits} THEN date_from_unix_date(try_cast({as_long} AS INT)) END", f"({null} OR {fits})"
    return _timestamp(column, raw)


def _timestamp(column: Column, raw: str) -> tuple[str, str]:
    """Epoch numbers in the declared unit (floor division, as Python's `//`) or the strict ISO form,
    within years 0001-9999; micros as Spark TIMESTAMP."""
    kind, null = _kind(raw), f"NOT {_present(raw)}"
    as_long = f"try_variant_get({raw}, '$', 'bigint')"
    encoding = column.wire_encoding
    number = "CAST(NULL AS BIGINT)"
    if encoding == "nanos":
        number = f"(({as_long} - pmod({as_long}, 1000)) div 1000)"
    elif encoding in _MICROS_PER:
        per = _MICROS_PER[encoding]  # type: ignore[index]
        low, high = _ceil_div(MIN_MICROS, per), MAX_MICROS // per
        number = f"(CASE WHEN {as_long} BETWEEN {low} AND {high} THEN try_multiply({as_long}, {per}) END)"
    text = f"try_variant_get({raw}, '$', 'string')"
    part = lambda n: f"regexp_extract({text}, '{_ISO}', {n})"  # noqa: E731
    fraction = f"coalesce(try_cast(rpad(substr({part(8)}, 1, 6), 6, '0') AS BIGINT), 0)"
    offset = part(9)
    offset_micros = (
        f"(CASE WHEN {offset} IN ('', 'Z') THEN 0 ELSE "
        f"(CASE WHEN substr({offset}, 1, 1) = '-' THEN -1 ELSE 1 END) * "
        f"(try_cast(substr({offset}, 2, 2) AS BIGINT) * 3600 + try_cast(substr({offset}, 5, 2) AS BIGINT) * 60) * 1000000 END)"
    )
    valid_offset = f"({offset} IN ('', 'Z') OR (try_cast(substr({offset}, 2, 2) AS INT) < 24 AND try_cast(substr({offset}, 5, 2) AS INT) < 60))"
    civil = (
        f"try_make_timestamp(try_cast({part(1)} AS INT), try_cast({part(2)} AS INT), try_cast({part(3)} AS INT), "
        f"try_cast({part(4)} AS INT), try_cast({part(5)} AS INT), try_cast({part(6)} AS INT), 'UTC')"
    )
    iso = (
        f"(CASE WHEN {kind} = 'STRING' AND {text} RLIKE '{_ISO}' AND try_cast({part(4)} AS INT) < 24 "
        f"AND try_cast({part(5)} AS INT) < 60 AND try_cast({part(6)} AS INT) < 60 AND {valid_offset} "
        f"THEN unix_micros({civil}) + {fraction} - {offset_micros} END)"
    )
    micros = f"(CASE WHEN {kind} = {_INT} THEN {number} ELSE {iso} END)"
    in_range = f"({micros} BETWEEN {MIN_MICROS} AND {MAX_MICROS})"
    return f"CASE WHEN {in_range} THEN timestamp_micros({micros}) END", f"({null} OR {in_range})"


def parse_sql(source: SourceTable, relation: str, batch_id: int, ingested_at_micros: int, max_line_chars: int | None) -> str:
    """SELECT over `relation` (`value`, `file`, `_lmv_seq`: the landing lines of this source) giving
    the mirror row of every line plus `_lmv_clean`; unclean rows are for `parse_envelope`."""
    alias = lambda c: q(f"_lmv_v_{c.name}")  # noqa: E731 - the image field of column c
    positions = [f"variant_get(e, {_path(p)})" for p in source.ordering]
    position = "CASE " + " ".join(f"WHEN {_present(p)} THEN {p}" for p in positions) + " END"
    ts_paths = ["variant_get(e, '$.source.ts_ms')", "variant_get(e, '$.ts_ms')"]
    source_ts = "CASE " + " ".join(f"WHEN {_present(p)} THEN {p}" for p in ts_paths) + " END"
    fields = ", ".join(f"variant_get(image, '$.{c.name}') AS {alias(c)}" for c in source.columns)
    typed = {c.name: _value(c, alias(c)) for c in source.columns}
    key_ok = " AND ".join(f"{_present(alias(source.column(k)))} AND {typed[k][1]}" for k in source.primary_key)
    all_ok = " AND ".join(ok for _, ok in typed.values())
    exact = (
        f"size(json_object_keys(to_json(image))) = {len(source.columns)} AND "
        + " AND ".join(f"{alias(c)} IS NOT NULL" for c in source.columns)
    )
    too_long = f"length(value) > {max_line_chars}" if max_line_chars is not None else "false"
    columns = ", ".join(
        f"{value} AS {q(c.name)}" if c.name in source.primary_key else f"CASE WHEN NOT deleted THEN {value} END AS {q(c.name)}"
        for c, (value, _) in zip(source.columns, typed.values(), strict=True)
    )
    ts_millis = "try_variant_get(ts, '$', 'bigint')"
    return f"""
WITH parsed AS (
  SELECT value, file, {SEQ}, try_parse_json(value) AS v FROM {relation}
), unwrapped AS (
  SELECT value, file, {SEQ},
         CASE WHEN variant_get(v, '$.payload') IS NOT NULL AND variant_get(v, '$.schema') IS NOT NULL
              THEN variant_get(v, '$.payload') ELSE v END AS e
  FROM parsed
), enveloped AS (
  SELECT value, file, {SEQ}, e, op, op = 'd' AS deleted,
         CASE WHEN op = 'd' THEN variant_get(e, '$.before') ELSE variant_get(e, '$.after') END AS image,
         {position} AS pos, {source_ts} AS ts
  FROM (SELECT *, CASE WHEN {_kind("variant_get(e, '$.op')")} = 'STRING' THEN try_variant_get(e, '$.op', 'string') END AS op
        FROM unwrapped)
), fielded AS (
  SELECT *, {fields} FROM enveloped
)
SELECT {columns},
       try_variant_get(pos, '$', 'bigint') AS {q(POSITION)},
       op AS {q(OP)},
       deleted AS {q(DELETED)},
       timestamp_micros(CASE WHEN {ts_millis} BETWEEN 0 AND {MAX_MICROS // 1000} THEN {ts_millis} * 1000 END) AS {q(SOURCE_TS)},
       timestamp_micros({ingested_at_micros}) AS {q(INGESTED_AT)},
       CAST({batch_id} AS BIGINT) AS {q(BATCH_ID)},
       value, file, {SEQ},
       coalesce(
         NOT ({too_long})
         AND {_kind("e")} LIKE 'OBJECT%'
         AND op IN ('c', 'r', 'u', 'd')
         AND {_kind("image")} LIKE 'OBJECT%'
         AND {_kind("pos")} = {_INT} AND try_variant_get(pos, '$', 'bigint') >= 0
         AND (ts IS NULL OR ({_kind("ts")} = {_INT} AND {ts_millis} BETWEEN 0 AND {MAX_MICROS // 1000}))
         AND {key_ok}
         AND (deleted OR ({all_ok} AND {exact})),
         false) AS {q(CLEAN)}
FROM fielded
"""
