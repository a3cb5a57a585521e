"""Turn a JSON value from an after/before image into the declared column type (pure, no Spark).

Strict on purpose: a string in a BIGINT column or a boolean in a STRING column is a producer bug and
goes to the dead-letter table rather than being guessed at. Temporal values come back as plain ints
(epoch micros for TIMESTAMP, days for DATE) which Arrow stores without conversion.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from typing import Any

from catalog.declarations import Column
from catalog.errors import EnvelopeError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ONE_MICRO = timedelta(microseconds=1)
# Valid range of Spark/Iceberg timestamps: years 0001..9999.
MIN_MICROS = (datetime(1, 1, 1, tzinfo=UTC) - EPOCH) // ONE_MICRO
MAX_MICROS = (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC) - EPOCH) // ONE_MICRO
_INT_RANGES = {"bigint": (-(2**63), 2**63 - 1), "int": (-(2**31), 2**31 - 1)}
_SCALE_TO_MICROS = {"micros": (1, 1), "millis": (1000, 1), "nanos": (1, 1000)}
_LONG_FRACTION = re.compile(r"(\.\d{6})\d+")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _describe(value: Any) -> str:
    kind = {str: "string", bool: "boolean", int: "integer", float: "number", dict: "object", list: "array"}.get(
        type(value), type(value).__name__
    )
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


def _timestamp(column: Column, value: Any) -> int:
    if _is_int(value):
        encoding = column.wire_encoding
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


def coerce(column: Column, value: Any) -> Any:
    """Return `value` as the Python value Arrow stores for `column`, or raise EnvelopeError."""
    if value is None:
        return None
    kind = column.type
    if kind == "string":
        if isinstance(value, str):
            return value
        raise _fail(column, value)
    if kind in _INT_RANGES:
        low, high = _INT_RANGES[kind]
        if _is_int(value) and low <= value <= high:
            return value
        raise _fail(column, value)
    if kind == "double":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise _fail(column, value)
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        raise _fail(column, value)
    if kind == "timestamp":
        return _timestamp(column, value)
    return _date(column, value)
