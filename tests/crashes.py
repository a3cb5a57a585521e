"""A unit that dies at a named crash point, in-process (the crash harness kills a real process there)."""

from __future__ import annotations

import pytest

from lakemv.core.batch.journal import BatchRef
from lakemv.spark.batch.runner import BatchProcessor
from lakemv.spark.views import indexed, maintain, write


class Crash(Exception):
    """The process died here (in-process: the processor is dropped and built again, as a restart does)."""


def crashing_at(p: BatchProcessor, wanted: str, batch: int | BatchRef, lines: list, last: bool = True) -> None:
    """Process `lines` as unit `batch` (a batch number: its only unit), dying at crash point `wanted`;
    then the processor is dropped, its state closed as a killed one leaves it."""

    def point(name: str, batch_id: int | None = None) -> None:
        if name == wanted:
            raise Crash(name)

    with pytest.MonkeyPatch.context() as patch:
        for module in (indexed, write, maintain):
            patch.setattr(module, "crash_point", point)
        with pytest.raises(Crash):
            p.process(batch if isinstance(batch, BatchRef) else BatchRef("local", batch), lines, last=last)
    p.close()
