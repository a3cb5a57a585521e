"""Turn a JSON value from an after/before image into the declared column type (pure, no Spark).

Strict on purpose: a string in a BIGINT column or a boolean in a STRING column is a producer bug and
goes to the dead-letter table rather than being guessed at. Temporal values come back as plain ints
(epoch micros for TIMESTAMP, days for DATE) which Arrow stores without conversion; a DECIMAL as a
`Decimal` of the declared scale; a TIME as its text `HH:MM:SS.ffffff`.

How a value is encoded is the message's Connect schema's to say when it has one (`Wire`, from
`lakemv.core.cdc.envelope`), else the declaration's.
"""

from __future__ import annotations

import base64
import binascii
import re
import sys
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any

from lakemv.catalog.declarations import ENCODINGS, Column
from lakemv.core.errors import EnvelopeError
from lakemv.core.types import TYPES, int_range

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ONE_MICRO = timedelta(microseconds=1)
# Valid range of Spark/Iceberg timestamps: years 0001..9999.
MIN_MICROS = (datetime(1, 1, 1, tzinfo=UTC) - EPOCH) // ONE_MICRO
MAX_MICROS = (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC) - EPOCH) // ONE_MICRO
_SCALE_TO_MICROS = {"micros": (1, 1), "millis": (1000, 1), "nanos": (1, 1000)}
_LONG_FRACTION = re.compile(r"(\.\d{6})\d+")


MICROS_PER_DAY = 86_400_000_000
_INT_RANGES = {kind: bounds for kind in TYPES if (bounds := int_range(kind)) is not None}


@dataclass(frozen=True, slots=True)
class Wire:
    """How one field is encoded, as a message's Connect schema says: an encoding (`micros`, `iso`,
    `base64`, ... as in declarations) and, for decimals, the scale of the unscaled integer."""

    encoding: str | None
    scale: int | None = None
    # What the logical type says beyond the encoding (for schema drift): not part of how it is encoded.
    type: str | None = field(default=None, compare=False)  # timestamp, date, time or decimal
    precision: int | None = field(default=None, compare=False)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _describe(value: Any) -> str:
    kind = {str: "string", bool: "boolean", int: "integer", float: "number", dict: "object", list: "array"}.get(type(value), type(value).__name__)
    text = repr(value)
    return f"{kind} {text[:40] + '...' if len(text) > 40 else text}"


def _fail(column: Column, value: Any, expected: str | None = None) -> EnvelopeError:
    return EnvelopeError(f"column {column.name!r}: expected {expected or column.spark_type}, got {_describe(value)}")


def iso_to_micros(text: str) -> int:
    """Parse an ISO-8601 timestamp (offset optional, naive means UTC) into epoch micros."""
    parsed = datetime.fromisoformat(_LONG_FRACTION.sub(r"\1", text.strip()))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return (parsed - EPOCH) // ONE_MICRO


def _timestamp(column: Column, value: Any, encoding: str | None) -> int:
    if _is_int(value):
        if encoding == "iso":
            raise _fail(column, value, "TIMESTAMP as an ISO-8601 string")
        multiply, divide = _SCALE_TO_MICROS[encoding]  # type: ignore[index]
        micros = value * multiply // divide
    elif isinstance(value, str):
        try:
            micros = iso_to_micros(value)
        except (ValueError, OverflowError):
            raise _fail(column, value, "TIMESTAMP (ISO-8601 or epoch number)") from None
    else:
        raise _fail(column, value)
    if not MIN_MICROS <= micros <= MAX_MICROS:
        raise EnvelopeError(f"column {column.name!r}: timestamp {value!r} is outside years 0001-9999")
    return micros


def _time(column: Column, value: Any, encoding: str | None) -> str:
    """A time of day as `HH:MM:SS.ffffff` (Debezium: MicroTime, Time in millis, NanoTime, or text)."""
    if _is_int(value) and encoding != "iso":
        multiply, divide = _SCALE_TO_MICROS[encoding or "micros"]
        micros = value * multiply // divide
        if not 0 <= micros <= MICROS_PER_DAY:  # PostgreSQL's time allows 24:00:00 itself
            raise EnvelopeError(f"column {column.name!r}: time {value!r} is outside one day")
    elif isinstance(value, str):
        text = _LONG_FRACTION.sub(r"\1", value.strip())
        text = re.sub(r"(Z|[+-]\d{2}(:?\d{2})?)$", "", text)  # ZonedTime: the UTC time of day is kept
        if re.fullmatch(r"24:00(:00(\.0+)?)?", text):
            micros = MICROS_PER_DAY
        else:
            try:
                moment = time.fromisoformat(text)
            except ValueError:
                raise _fail(column, value, "TIME (HH:MM:SS[.ffffff] or a number since midnight)") from None
            micros = ((moment.hour * 60 + moment.minute) * 60 + moment.second) * 1_000_000 + moment.microsecond
    else:
        raise _fail(column, value, "TIME (HH:MM:SS[.ffffff] or a number since midnight)")
    seconds, micro = divmod(micros, 1_000_000)
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{micro:06d}"


def _decimal(column: Column, value: Any, encoding: str | None, scale: int | None) -> Decimal:
    """A decimal of the declared scale: base64 of the unscaled two's-complement big-endian integer
    (Connect's Decimal; its scale from the schema, else the declared one), Debezium's
    VariableScaleDecimal `{scale, value}`, text, or a JSON number."""
    if isinstance(value, dict) and set(value) == {"scale", "value"} and _is_int(value["scale"]):
        return _decimal(column, value["value"], "base64", value["scale"])
    with localcontext() as context:  # exact: 38 digits and more (a value too wide is a dead letter, not rounded)
        context.prec = 1000
        try:
            return _exact_decimal(column, value, encoding, scale)
        except InvalidOperation:
            raise EnvelopeError(f"column {column.name!r}: {_describe(value)} does not fit {column.spark_type}") from None


def _exact_decimal(column: Column, value: Any, encoding: str | None, scale: int | None) -> Decimal:
    if isinstance(value, str) and encoding == "base64":
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise _fail(column, value, f"{column.spark_type} as base64 of its unscaled bytes") from None
        number = Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-(column.scale if scale is None else scale))
    elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
        if isinstance(value, str) and not re.fullmatch(r"\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*", value):
            raise _fail(column, value)  # Decimal() would also take "1_000", "NaN", "Infinity"
        try:
            number = Decimal(value) if not isinstance(value, float) else Decimal(repr(value))
        except InvalidOperation:
            raise _fail(column, value) from None
        if not number.is_finite():
            raise _fail(column, value)
    else:
        raise _fail(column, value)
    assert column.scale is not None and column.precision is not None
    exact = number.quantize(Decimal(1).scaleb(-column.scale))
    if exact != number:
        raise EnvelopeError(f"column {column.name!r}: {number} has more than the {column.scale} decimal places of {column.spark_type}")
    if len(exact.as_tuple().digits) > column.precision and exact != 0:
        raise EnvelopeError(f"column {column.name!r}: {number} has more digits than {column.spark_type} holds")
    return exact


def _date(column: Column, value: Any) -> int:
    if _is_int(value):
        days = value
    elif isinstance(value, str):
        try:
            days = (date.fromisoformat(value.strip()[:10]) - date(1970, 1, 1)).days
        except ValueError:
            raise _fail(column, value, "DATE (ISO-8601 or days since epoch)") from None
    else:
        raise _fail(column, value)
    if not -719162 <= days <= 2932896:
        raise EnvelopeError(f"column {column.name!r}: date {value!r} is outside years 0001-9999")
    return days


_DOUBLE_MAX = int(sys.float_info.max)
# A JSON escape of half a surrogate pair with no other half reads as that code point alone: no UTF-8 holds it.
_SURROGATE = re.compile("[\ud800-\udfff]")


def text_only(value: str) -> bool:
    """Whether `value` holds no surrogate code point (JSON's escape of half a pair, read alone): whether UTF-8 can hold it."""
    return value.isascii() or _SURROGATE.search(value) is None


def coerce(column: Column, value: Any, wire: Wire | None = None) -> Any:
    """Return `value` as the Python value Arrow stores for `column`, or raise EnvelopeError.
    `wire` is the field's encoding as the message's schema gives it (None: the declaration's)."""
    if value is None:
        return None
    kind = column.type
    if kind == "string":
        if isinstance(value, str):
            lone = None if value.isascii() else _SURROGATE.search(value)
            if lone is None:
                return value
            raise EnvelopeError(f"column {column.name!r}: a lone surrogate escape (\\u{ord(lone.group()):04x}) is not Unicode text")
        raise _fail(column, value)
    if (bounds := _INT_RANGES.get(kind)) is not None:
        if isinstance(value, int) and not isinstance(value, bool) and bounds[0] <= value <= bounds[1]:
            return value
        raise _fail(column, value)
    encoding = column.wire_encoding
    if wire is not None and wire.encoding in ENCODINGS.get(kind, ()):
        encoding = wire.encoding  # type: ignore[assignment]
    if kind == "double":
        if isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool) and abs(value) <= _DOUBLE_MAX):
            return float(value)
        raise _fail(column, value)  # (an integer past a double's range, too)
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        raise _fail(column, value)
    if kind == "timestamp":
        return _timestamp(column, value, encoding)
    if kind == "time":
        return _time(column, value, encoding)
    if kind == "decimal":
        return _decimal(column, value, encoding, wire.scale if wire is not None else None)
    return _date(column, value)
