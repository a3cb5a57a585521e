"""Debezium envelope parsing as Spark SQL, for large units: the same rules as `lakemv.core.cdc.envelope`. Pure.

`lakemv.core.cdc.envelope` parses one line at a time in the driver; a snapshot or a backlog of millions of
lines is parsed here instead, set-wise by Spark (`lakemv.spark.bulk` runs the SQL). Python stays the one
definition of the rules: the SQL only accepts a line when it can prove `parse_envelope` gives the
same change, typed the same way, and marks every other line `_lmv_clean = false`: malformed JSON, a
wrapper with a null payload, an unknown op, a missing image or key, a value of the wrong JSON type or
out of range, an ISO timestamp outside the strict form below, an image with fields the declaration
lacks or without some it declares, an over-long line. Those few go to `parse_envelope`, which turns
them into changes, skips or dead letters with their reasons, exactly as it always did.

A line is read by Spark's JSON reader (`from_json`), its envelope and images typed by the declaration
(a whole line as a VARIANT cost about 70 µs: a Debezium line is two thirds Connect schema). What the
reader is lenient about is checked beside it: a value it could not convert marks the line (its
corrupt-record column), text after the first value is found by `lakemv_json_closes` (a small JVM
function), and a `schema` or `payload` that may be present as JSON null leaves the line to the driver.
The reader takes any JSON value as a string field's text and does not say which fields were absent or
undeclared, so the image's JSON kinds are read beside it by `lakemv_json_kinds` (another small JVM
function), one character a declared column, e.g. `ISN` (an integer, a string, a null; `-` absent, a
trailing `+` when the image has an undeclared field), matched against one pattern per table that
spells every declared column with the JSON kinds its declared type accepts - so the type checks and
"exactly the declared fields" are one regular expression over a few characters. The SQL carries no
per-unit literal (batch id, time), so Spark's compiled code is reused from unit to unit.
"""

from __future__ import annotations

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
KINDS = "lakemv_json_kinds"  # SQL function (the JVM's dev.lakemv.spark.JsonKinds): the JSON kinds of an object's named fields
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
_PYTHON_ONLY = tuple(name for name, facts in TYPES.items() if not facts.json_kinds)


def _kinds(column: Column) -> str:
    """The JSON kinds (`lakemv_json_kinds`' characters) a declared column's values take set-wise."""
    if column.type == "timestamp" and column.wire_encoding == "iso":
        return "S"
    return TYPES[column.type].json_kinds


def _class(column: Column, nullable: bool) -> str:
    """A regular expression of one character: the kinds the column accepts (N: null), or never."""
    return f"[{_kinds(column)}{'N' if nullable else ''}]" if _kinds(column) else "(?!)"


# How the JSON reader types a declared column's image field (the checks and conversions are the SQL's).
_READ_AS = {"string": "STRING", "bigint": "BIGINT", "int": "BIGINT", "double": "DOUBLE", "boolean": "BOOLEAN", "date": "BIGINT"}


def _read_as(column: Column) -> str:
    """The type the JSON reader reads `column`'s image field as (any other type: its text)."""
    return _READ_AS.get(column.type, "STRING")


def _image_ddl(source: SourceTable, keys_only: bool = False) -> str:
    """An image's struct type for the JSON reader (a timestamp as text: a number or ISO text). A deletion
    reads its image's key alone: the other fields' values, read as text whatever they are, are looked at
    only for placeholders."""
    typed = lambda c: _read_as(c) if not keys_only or c.name in source.primary_key else "STRING"  # noqa: E731
    return "STRUCT<" + ", ".join(f"{q(c.name)}: {typed(c)}" for c in source.columns) + ">"


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
    """The envelope's fields the rules read, typed for Spark's JSON reader."""
    in_source = sorted({"ts_ms", *(p.split(".", 1)[1] for p in source.ordering if p.startswith("source."))} - {"snapshot"})
    fields = ", ".join([*(f"{q(f)}: BIGINT" for f in in_source), "snapshot: STRING"])
    return f"op STRING, before {_image_ddl(source, keys_only=True)}, after {_image_ddl(source)}, source STRUCT<{fields}>, ts_ms BIGINT"


def _path(path: str) -> str:
    """An ordering path (`ts_ms` or `source.<field>`) in the typed envelope `e`."""
    return "e." + ".".join(q(part) for part in path.split("."))


def image_pattern(source: SourceTable) -> str:
    """The regular expression the `lakemv_json_kinds` of a clean after-image matches: each declared column
    of a kind its type accepts (a key never null), no other field."""
    return "^" + "".join(_class(c, c.name not in source.primary_key) for c in source.columns) + "$"


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _value(column: Column, raw: str) -> tuple[str, str]:
    """(typed value, extra check) for image field `raw` as the JSON reader typed it (`_READ_AS`), its JSON
    kind already checked by the image pattern; the extra check covers ranges and the ISO form."""
    if column.type in _PYTHON_ONLY:
        return f"CAST(NULL AS {column.spark_type})", "false"
    if column.type in ("string", "bigint", "boolean"):
        return raw, "true"
    if column.type == "int":
        return f"try_cast({raw} AS INT)", f"({raw} IS NULL OR {raw} BETWEEN {-(2**31)} AND {2**31 - 1})"
    if column.type == "double":
        return raw, f"({raw} IS NULL OR (NOT isnan({raw}) AND abs({raw}) < double('Infinity')))"
    if column.type == "date":
        return f"date_from_unix_date(try_cast({raw} AS INT))", f"({raw} IS NULL OR {raw} BETWEEN {_MIN_DAYS} AND {_MAX_DAYS})"
    micros = q(f"_lmv_us_{column.name}")  # computed in its own steps (see `_iso_steps`)
    return f"timestamp_micros({micros})", f"({raw} IS NULL OR {micros} BETWEEN {MIN_MICROS} AND {MAX_MICROS})"


def _iso_steps(column: Column, raw: str, at: int) -> tuple[str, str, str]:
    """Three steps of SELECT items for a timestamp field (`raw`: its text as the JSON reader gives it, a
    number's or a string's; `at`: its place in the image's kinds), each naming what the next one reads
    once: whether it is a JSON integer, the text's parts (strict ISO form only), and its epoch micros - a
    number in the declared unit (floor division, as Python's `//`) or the ISO parts (offset applied,
    naive means UTC)."""
    name = column.name
    text, match, offset, micros = (q(f"_lmv_{k}_{name}") for k in ("text", "iso", "offset", "us"))
    first = f"substr(kinds, {at}, 1) = 'I' AS {q(f'_lmv_num_{name}')}, try_cast({raw} AS BIGINT) AS {q(f'_lmv_long_{name}')}, {raw} AS {text}"
    iso_only = f"CASE WHEN NOT {q(f'_lmv_num_{name}')} THEN"  # (a number's text is not matched against the ISO form)
    second = (
        f"{iso_only} {text} RLIKE '{_ISO}' END AS {match}, {iso_only} regexp_extract({text}, '(Z|[+-][0-9]{{2}}:[0-9]{{2}})$', 1) END AS {offset}, "
        f"{iso_only} regexp_extract({text}, '\\\\.([0-9]+)', 1) END AS {q(f'_lmv_frac_{name}')}"
    )
    long = q(f"_lmv_long_{name}")
    encoding = column.wire_encoding
    number = "CAST(NULL AS BIGINT)"
    if encoding == "nanos":
        number = f"(({long} div 1000) - CASE WHEN {long} < 0 AND pmod({long}, 1000) <> 0 THEN 1 ELSE 0 END)"  # (no overflow at the lowest long)
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
    image = lambda c: (
        f"CASE WHEN deleted THEN e.before.{q(c.name)} ELSE e.after.{q(c.name)} END" if c.name in source.primary_key else f"e.after.{q(c.name)}"
    )  # noqa: E731
    fields = ", ".join(f"{image(c)} AS {field(c)}" for c in source.columns)
    at = {c.name: i for i, c in enumerate(source.columns, 1)}  # a column's place in the image's kinds
    steps = [_iso_steps(c, field(c), at[c.name]) for c in source.columns if c.type == "timestamp"]
    texts, parts, micros = ("".join(f", {s[i]}" for s in steps) for i in range(3))
    typed = {c.name: _value(c, field(c)) for c in source.columns}
    keys = " AND ".join(f"substr(kinds, {at[k]}, 1) RLIKE '^{_class(source.column(k), False)}$' AND {typed[k][1]}" for k in source.primary_key)
    checks = " AND ".join(check for _, check in typed.values() if check != "true") or "true"
    # (no line has more characters than bytes: most are measured by their bytes alone)
    too_long = f"(octet_length(value) > {max_line_chars} AND length(value) > {max_line_chars})" if max_line_chars is not None else "false"
    # Debezium's placeholder for an unavailable value as an image value (or an array's first element), in
    # any spelling: the line is the driver's (lakemv.core.cdc.unavailable), as is one that is not UTF-8 (its
    # dead letter says where). Read off the parsed image, not searched for in the line (a regex over every
    # line was the set-wise parse's largest cost); a placeholder elsewhere is never read. An after-image's
    # typed columns fail the reader on a string, and its kinds hold no array: only its text columns can
    # hold one. A deletion's image is read as text but for its key: any field can, and an array's
    # first element is not read here (such a line is the driver's).
    spellings = ", ".join(f"'{spelling}'" for spelling in sorted(SPELLINGS))
    texts_of = lambda image, columns: " OR ".join(f"coalesce(e.{image}.{q(c.name)} IN ({spellings}), false)" for c in columns) or "false"  # noqa: E731
    text_columns = [c for c in source.columns if _read_as(c) == "STRING"]
    before_texts = [c for c in source.columns if c.name not in source.primary_key or c in text_columns]
    placeholder = f"CASE WHEN deleted THEN instr(kinds, 'A') > 0 OR {texts_of('before', before_texts)} ELSE {texts_of('after', text_columns)} END"
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
    # where the image is, for its kinds: in the payload read after a vouched beginning, or in the line
    image_path = (
        "CASE WHEN known = 0 AND wrapped THEN (CASE WHEN e.op = 'd' THEN 'payload.before' ELSE 'payload.after' END) "
        "ELSE (CASE WHEN e.op = 'd' THEN 'before' ELSE 'after' END) END"
    )
    names = ",".join(c.name for c in source.columns)
    # Wrapped means both `schema` and `payload` present, as the driver reads it; the reader cannot tell a
    # JSON null from an absent field, so a line where either may be a null is the driver's (a `payload` key
    # spelled with an escape is told by its decoded name, `lakemv_json_kinds` of the line's own fields).
    payload_key = (
        f"instr(value, '\"payload\"') > 0 OR (instr(value, '\\\\u') > 0 AND coalesce(substr({KINDS}(bin, 0, '', 'payload'), 1, 1), '') <> '-')"
    )
    maybe_null = f"(j.payload IS NULL AND (j.schema IS NOT NULL OR {payload_key})) OR (j.payload IS NOT NULL AND j.schema IS NULL)"
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
         CASE WHEN readable THEN {KINDS}(bin, known, {image_path}, '{names}') END AS kinds,
         {position} AS pos, coalesce(e.source.ts_ms, e.ts_ms) AS ts
  FROM unwrapped
), fielded AS (
  SELECT *, {fields} FROM enveloped
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
         AND kinds IS NOT NULL
         AND CASE WHEN deleted THEN {keys} ELSE kinds RLIKE '{image_pattern(source)}' AND {checks} END,
         false) AS {q(CLEAN)}
FROM timed
"""
