"""Named crash and hold points, for the crash harness and the signal tests.

`LAKEMV_CRASH_AT=<point>[@<batch>]` arms one point (e.g. `feed:user_profile@2`). When ingest reaches
it, it writes the point's name to the file named by `LAKEMV_CRASH_SIGNAL` and sleeps; the harness
then kills the whole process group with SIGKILL, as a power cut would; the JVM and any other child
lakemv started run in sessions of their own, so the crash point kills them itself first. Without a
signal file the process kills its own group.

`LAKEMV_HOLD_AT=<point>[@<batch>]` holds the unit at that point instead (writing the point's name to
`LAKEMV_HOLD_SIGNAL`) until a stop is requested: a test can then signal lakemv while a unit is
certainly in progress.

Every point is a step boundary, so it is also where a requested stop (SIGINT/SIGTERM) takes effect
in the middle of a unit. Unarmed, a point costs two environment lookups.
"""

from __future__ import annotations

import os
import signal
import time

from lakemv.core.runtime import lifecycle

CRASH_AT = "LAKEMV_CRASH_AT"
CRASH_SIGNAL = "LAKEMV_CRASH_SIGNAL"
HOLD_AT = "LAKEMV_HOLD_AT"
HOLD_SIGNAL = "LAKEMV_HOLD_SIGNAL"


def armed(point: str, batch_id: int | None, variable: str = CRASH_AT) -> bool:
    """Whether the point armed in `variable` (if any) is `point` in batch `batch_id`."""
    spec = os.environ.get(variable)
    if not spec:
        return False
    name, _, batch = spec.partition("@")
    return name == point and (not batch or batch_id is None or int(batch) == batch_id)


def _announce(variable: str, point: str, batch_id: int | None) -> bool:
    target = os.environ.get(variable)
    if not target:
        return False
    with open(target, "w", encoding="utf-8") as handle:
        handle.write(f"{point}@{batch_id}\n")
    return True


def crash_point(point: str, batch_id: int | None = None) -> None:
    """Honour a requested stop; crash here, or hold here, if this point is armed."""
    lifecycle.check()
    if armed(point, batch_id, HOLD_AT):
        _announce(HOLD_SIGNAL, point, batch_id)
        while True:  # until a stop request makes check() raise
            time.sleep(0.05)
            lifecycle.check()
    if not armed(point, batch_id):
        return
    lifecycle.kill_children()  # the JVM goes down with the driver, at the same instant
    if not _announce(CRASH_SIGNAL, point, batch_id):
        os.killpg(os.getpgrp(), signal.SIGKILL)
    while True:  # the harness SIGKILLs the process group
        time.sleep(60)
