"""Debezium envelope parsing as Spark SQL, for large units: the same rules as `lakemv.core.cdc.envelope`. Pure.

`lakemv.core.cdc.envelope` parses one line at a time in the driver; a snapshot or a backlog of millions of
lines is parsed here instead, set-wise by Spark (`lakemv.spark.bulk` runs the SQL). Python stays the one
definition of the rules: the SQL only accepts a line when it can prove `parse_envelope` gives the
same change, typed the same way, and marks every other line `_lmv_clean = false`: malformed JSON, a
wrapper with a null payload, an unknown op, a missing image or key, a value of the wrong JSON type or
out of range, an ISO timestamp outside the strict form below, an image with fields the declaration
lacks or without some it declares, an over-long line. Those few go to `parse_envelope`, which turns
them into changes, skips or dead letters with their reasons, exactly as it always did.

A line is read by Spark's JSON reader (`from_json`), its envelope typed and each image as a VARIANT
(a whole line as a VARIANT cost about 70 µs: a Debezium line is two thirds Connect schema). What the
reader is lenient about is checked beside it: a value it could not convert marks the line (its
corrupt-record column), text after the first value is found by `lakemv_json_closes` (a small JVM
function), and a `schema` or `payload` that may be present as JSON null leaves the line to the driver.
An image's JSON types are read through `schema_of_variant`, one string, e.g.
`OBJECT<email: STRING, id: BIGINT, username: VOID>` (fields sorted, JSON null as VOID), matched
against one pattern per table that spells every declared column with the JSON types its declared
type accepts - so the type checks and "exactly the declared fields" are one regular expression.
Each value is then extracted once. The SQL carries no per-unit literal (batch id, time), so Spark's
compiled code is reused from unit to unit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from lakemv.catalog.declarations import ENCODINGS, Column, SourceTable
from lakemv.catalog.tables import DELETED, OP, POSITION, SOURCE_TS
from lakemv.core.cdc.coerce import MAX_MICROS, MIN_MICROS
from lakemv.core.cdc.envelope import wrapped_beginning
from lakemv.core.cdc.unavailable import SPELLINGS
from lakemv.core.sql.quote import q, spark_string
from lakemv.core.types import DRIVER_ONLY_LOGICAL, LOGICAL, TYPES

CLEAN = "_lmv_clean"
SEQ = "_lmv_seq"  # the line's place in the unit: on equal positions the later line wins
CLOSES = "lakemv_json_closes"  # SQL function (the JVM's dev.lakemv.spark.JsonCloses): one value, its closers, nothing after
_BAD = "_lmv_bad"  # the JSON reader's corrupt-record column: a value it could not convert
# Spark's JSON reader as strict as the driver's: no single quotes, no NaN or Infinity (other leniencies are off by default).
_READER = f"map('columnNameOfCorruptRecord', '{_BAD}', 'allowSingleQuotes', 'false', 'allowNonNumericNumbers', 'false')"
# What the agreement check reads of a Connect schema: each image's fields, their names and logical types.
_CONNECT = "STRUCT<fields: ARRAY<STRUCT<field: STRING, fields: ARRAY<STRUCT<field: STRING, name: STRING>>>>>"
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
    for kind in ("timestamp", "date")
    for encoding in ENCODINGS[kind]
}


def _schema_agrees(column: Column) -> str:
    """SQL: the image's Connect schema gives `column` no logical type, or one meaning its declared encoding."""
    names = ", ".join(["''", *(f"'{n}'" for n in _LOGICAL_NAMES[(column.type, column.wire_encoding)])])  # type: ignore[index]
    return f"coalesce(try_element_at(filter(image_fields, x -> x.field = '{column.name}'), 1).name, '') IN ({names})"


def _envelope_ddl(source: SourceTable) -> str:
    """The envelope's fields the rules read, typed for Spark's JSON reader (an image as a VARIANT)."""
    in_source = sorted({"ts_ms", *(p.split(".", 1)[1] for p in source.ordering if p.startswith("source."))} - {"snapshot"})
    fields = ", ".join([*(f"{q(f)}: BIGINT" for f in in_source), "snapshot: STRING"])
    return f"op STRING, before VARIANT, after VARIANT, source STRUCT<{fields}>, ts_ms BIGINT"


def _path(path: str) -> str:
    """An ordering path (`ts_ms` or `source.<field>`) in the typed envelope `e`."""
    return "e." + ".".join(q(part) for part in path.split("."))


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


def _agrees(schema: Any, source: SourceTable) -> bool:
    """Does a Connect schema give each temporal column, in both images, no logical type or one meaning its
    declared encoding (the rule of `_schema_agrees`, read the way the SQL reads it: the first entry of a name)?"""
    if not isinstance(schema, dict) or not isinstance(schema.get("fields"), list) or not all(isinstance(f, dict) for f in schema["fields"]):
        return False
    for image in ("before", "after"):
        struct = next((f for f in schema["fields"] if f.get("field") == image), None)
        fields = struct.get("fields") if struct is not None else None
        if fields is None:
            continue
        if not isinstance(fields, list) or not all(isinstance(f, dict) for f in fields):
            return False
        for column in source.columns:
            if column.type not in ("timestamp", "date"):
                continue
            entry = next((f for f in fields if f.get("field") == column.name), None)
            name = entry.get("name") if entry is not None else None
            if name is not None and (not isinstance(name, str) or name not in ("", *_LOGICAL_NAMES[(column.type, column.wire_encoding)])):  # type: ignore[index]
                return False
    return True


def beginning(line: str, source: SourceTable) -> str | None:
    """How a wrapped line of `source` begins, `{"schema":<S>,"payload":`, when the SQL may take every line
    that begins so without reading its schema: <S> is exactly one JSON object and agrees with the
    declaration (`_agrees`). None otherwise (such lines are read whole)."""
    found = wrapped_beginning(line)
    return found[0] if found is not None and _agrees(found[1], source) else None


def parse_sql(source: SourceTable, relation: str, max_line_chars: int | None, beginnings: Sequence[str] = ()) -> str:
    """SELECT over `relation` (`value`, `file`, `_lmv_seq`: the landing lines of this source) giving
    the mirror row of every line (without the per-unit batch id and ingest time) plus `_lmv_clean`;
    the caller hands unclean lines to `parse_envelope`. A line that begins with one of `beginnings`
    (`beginning`: a wrapped line's vouched `{"schema":<S>,"payload":`) has only its payload read."""
    field = lambda c: q(f"_lmv_v_{c.name}")  # noqa: E731 - the image field of column c
    position = "coalesce(" + ", ".join(_path(p) for p in source.ordering) + ")"  # the first present (a wrong type marks the line)
    fields = ", ".join(f"variant_get(image, '$.{c.name}') AS {field(c)}" for c in source.columns)
    stamps = [c for c in source.columns if c.type == "timestamp"]
    steps = [_iso_steps(c, field(c)) for c in stamps]
    texts, parts, micros = ("".join(f", {s[i]}" for s in steps) for i in range(3))
    typed = {c.name: _value(c, field(c)) for c in source.columns}
    keys = " AND ".join(
        f"schema_of_variant({field(source.column(k))}) RLIKE '^({'|'.join(_kinds(source.column(k)))})$' AND {typed[k][1]}" for k in source.primary_key
    )
    checks = " AND ".join(check for _, check in typed.values() if check != "true") or "true"
    # (no line has more characters than bytes: most are measured by their bytes alone)
    too_long = f"(octet_length(value) > {max_line_chars} AND length(value) > {max_line_chars})" if max_line_chars is not None else "false"
    # Debezium's placeholder for an unavailable value as an image value (or an array's first element), in
    # any spelling: the line is the driver's (lakemv.core.cdc.unavailable), as is one that is not UTF-8 (its
    # dead letter says where). Read off the parsed image, not searched for in the line (a regex over every
    # line was the set-wise parse's largest cost); a placeholder elsewhere is never read.
    spellings = ", ".join(f"'{spelling}'" for spelling in sorted(SPELLINGS))
    in_image = " OR ".join(
        f"coalesce(try_variant_get(image, '$.{c.name}{at}', 'string') IN ({spellings}), false)" for c in source.columns for at in ("", "[0]")
    )
    # (an after-image of the declared JSON types holds no array: only its text values can be placeholders)
    texts_only = " OR ".join(
        f"coalesce(try_variant_get({field(c)}, '$', 'string') IN ({spellings}), false)" for c in source.columns if "STRING" in _kinds(c)
    )
    placeholder = f"CASE WHEN deleted THEN {in_image} ELSE {texts_only or 'false'} END"
    # A Connect schema may say a field is encoded otherwise than declared (lakemv.core.cdc.envelope.field_wires):
    # a wrapped line is clean only if its schema names, for each temporal column, no logical type or
    # one that means the declared encoding; decimals and times are Python's anyway.
    agreed = [_schema_agrees(c) for c in source.columns if c.type in ("timestamp", "date")]
    unwrapped_only = "(NOT wrapped OR known > 0 OR (" + " AND ".join(agreed) + "))" if agreed else "true"
    columns = ", ".join(
        f"{value} AS {q(c.name)}" if c.name in source.primary_key else f"CASE WHEN NOT deleted THEN {value} END AS {q(c.name)}"
        for c, (value, _) in zip(source.columns, typed.values(), strict=True)
    )
    envelope = _envelope_ddl(source)
    reader = f"schema {_CONNECT}, payload STRUCT<{envelope}>, {envelope}, {_BAD} STRING"
    # the byte length of the vouched beginning a line starts with (0: none, the line is read whole)
    known = (
        ("CASE " + " ".join(f"WHEN startswith(value, {spark_string(b)}) THEN {len(b.encode())}" for b in beginnings) + " ELSE 0 END")
        if beginnings
        else "0"
    )
    of = lambda j: "named_struct(" + ", ".join(f"'{f}', {j}.{f}" for f in ("op", "before", "after", "source", "ts_ms")) + ")"  # noqa: E731
    image_fields = (
        "CASE WHEN known = 0 AND wrapped THEN try_element_at(filter(j.schema.fields, f -> f.field = CASE WHEN e.op = 'd' THEN 'before' ELSE 'after' END), 1).fields END"
        if agreed
        else "CAST(NULL AS ARRAY<STRUCT<field: STRING, name: STRING>>)"
    )
    # Wrapped means both `schema` and `payload` present, as the driver reads it; the reader cannot tell a
    # JSON null from an absent field, so a line where either may be a null is the driver's.
    maybe_null = "(j.payload IS NULL AND (j.schema IS NOT NULL OR instr(value, '\"payload\"') > 0)) OR (j.payload IS NOT NULL AND j.schema IS NULL)"
    return f"""
WITH json AS (
  SELECT value, file, {SEQ}, bin, known,
         CASE WHEN known > 0 THEN from_json(CAST(substr(bin, known + 1) AS STRING), '{envelope}, {_BAD} STRING', {_READER}) END AS p,
         CASE WHEN known = 0 THEN from_json(value, '{reader}', {_READER}) END AS j
  FROM (SELECT value, file, {SEQ}, CAST(value AS BINARY) AS bin, {known} AS known FROM {relation})
), unwrapped AS (
  SELECT *, CASE WHEN known > 0 THEN {of("p")} WHEN wrapped THEN j.payload ELSE {of("j")} END AS e
  FROM (SELECT *, known > 0 OR (j.payload IS NOT NULL AND j.schema IS NOT NULL) AS wrapped,
               CASE WHEN known > 0 THEN p IS NOT NULL AND p.{_BAD} IS NULL AND {CLOSES}(bin, known, 1)
                    ELSE j IS NOT NULL AND j.{_BAD} IS NULL AND NOT ({maybe_null}) AND {CLOSES}(bin, 0, 0) END AS readable
        FROM json)
), enveloped AS (
  SELECT value, file, {SEQ}, j, known, wrapped, readable, e, e.op AS op, e.op = 'd' AS deleted,
         {image_fields} AS image_fields,
         CASE WHEN e.op = 'd' THEN e.before ELSE e.after END AS image,
         {position} AS pos, coalesce(e.source.ts_ms, e.ts_ms) AS ts
  FROM unwrapped
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
       pos AS {q(POSITION)},
       op AS {q(OP)},
       deleted AS {q(DELETED)},
       timestamp_micros(CASE WHEN ts BETWEEN 0 AND {MAX_MICROS // 1000} THEN ts * 1000 END) AS {q(SOURCE_TS)},
       value, file, {SEQ},
       coalesce(
         readable
         AND NOT ({too_long})
         AND is_valid_utf8(value) AND NOT ({placeholder})
         AND NOT (op = 'r' AND e.source.snapshot = 'incremental')
         AND {unwrapped_only}
         AND op IN ('c', 'r', 'u', 'd')
         AND pos >= 0
         AND (ts IS NULL OR ts BETWEEN 0 AND {MAX_MICROS // 1000})
         AND CASE WHEN deleted THEN image_kind LIKE 'OBJECT%' AND {keys}
                  ELSE image_kind RLIKE '{image_pattern(source)}' AND {checks} END,
         false) AS {q(CLEAN)}
FROM timed
"""
