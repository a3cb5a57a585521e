"""Event-time durations as users write them in declarations and in Spark's `window()`: `10 minutes`.

One spelling for both places: an integer and a unit (`90 seconds`, `1 hour`, `2 days`), or several
such parts (`1 hour 30 minutes`), the way Spark reads a window's duration string. Pure.
"""

from __future__ import annotations

import re

MICROS = {
    "microsecond": 1,
    "millisecond": 1_000,
    "second": 1_000_000,
    "minute": 60_000_000,
    "hour": 3_600_000_000,
    "day": 86_400_000_000,
    "week": 7 * 86_400_000_000,
}
_PART = re.compile(r"(\d+)\s*([a-z]+)\b")
_SHORT = {"us": "microsecond", "ms": "millisecond", "sec": "second", "min": "minute"}


def parse_duration(text: str) -> int:
    """`text` in microseconds; ValueError saying what is accepted when it is not a duration."""
    spelled = text.strip().lower()
    if spelled.startswith("interval "):
        spelled = spelled[len("interval ") :].strip()
    parts = list(_PART.finditer(spelled))
    if not parts or _PART.sub("", spelled).strip():
        raise ValueError(f"{text!r} is not a duration: write a number and a unit, e.g. '10 minutes', '1 hour', '1 day'")
    total = 0
    for part in parts:
        unit = _SHORT.get(part[2], part[2])
        if unit not in MICROS and unit.endswith("s"):
            unit = _SHORT.get(unit[:-1], unit[:-1])
        if unit not in MICROS:
            raise ValueError(f"{text!r}: unknown unit {part[2]!r} (units: {', '.join(f'{u}s' for u in MICROS)})")
        total += int(part[1]) * MICROS[unit]
    return total


def format_duration(micros: int) -> str:
    """The shortest exact spelling of `micros` as `parse_duration` reads it: `3600000000` -> `1 hour`
    (a negative one with a leading `-`)."""
    if micros == 0:
        return "0 seconds"
    if micros < 0:
        return "-" + format_duration(-micros)
    parts = []
    rest = micros
    for unit, size in sorted(MICROS.items(), key=lambda item: -item[1]):
        if unit == "week" and rest % size:
            continue
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count} {unit}{'s' if count > 1 else ''}")
    return " ".join(parts)
