"""Named crash points, for the crash harness: the process stops at a step and waits to be killed.

`LAKEMV_CRASH_AT=<point>[@<batch>]` arms one point (e.g. `feed:user_profile@2`). When ingest reaches
it, it writes the point's name to the file named by `LAKEMV_CRASH_SIGNAL` and sleeps; the harness
then kills the whole process group with SIGKILL, as a power cut would. Without a signal file the
process kills its own group. Unarmed, a crash point costs one environment lookup.
"""

from __future__ import annotations

import os
import signal
import time

CRASH_AT = "LAKEMV_CRASH_AT"
CRASH_SIGNAL = "LAKEMV_CRASH_SIGNAL"


def armed(point: str, batch_id: int | None) -> bool:
    """Whether the armed crash point (if any) is `point` in batch `batch_id`."""
    spec = os.environ.get(CRASH_AT)
    if not spec:
        return False
    name, _, batch = spec.partition("@")
    return name == point and (not batch or batch_id is None or int(batch) == batch_id)


def crash_point(point: str, batch_id: int | None = None) -> None:
    """Stop here, to be killed, if this point is armed."""
    if not armed(point, batch_id):
        return
    target = os.environ.get(CRASH_SIGNAL)
    if not target:
        os.killpg(os.getpgrp(), signal.SIGKILL)
    with open(target, "w", encoding="utf-8") as handle:
        handle.write(f"{point}@{batch_id}\n")
    while True:  # the harness SIGKILLs the process group
        time.sleep(60)
