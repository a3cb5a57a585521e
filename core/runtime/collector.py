"""Python's cyclic garbage collector, paused while a batch runs (its lines read, its units applied). Pure.

A unit makes hundreds of thousands of rows, keys and changes that live until it ends and are then
freed by reference counting: they hold no cycles. While they live, they count as long-lived objects,
and CPython runs a full collection whenever those grow by a quarter: a unit of a backlog ran several,
each scanning the driver's millions of objects for 0.2-0.5 s and finding nothing (GC callbacks
over a 300k-event catch-up at 100k users: ~17 full collections in its two drains, ~5 s of ~100 s; none
since, the remaining ones are the bench's own backlog generator's). The collector is
paused for the batch and resumes after it, so what a batch leaves in cycles is collected between batches.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0  # units running (a nested pause leaves the collector to the outermost)
_resume = False


@contextmanager
def paused() -> Iterator[None]:
    """The collector off for the block (as it was before, after it, even when the block raises)."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()
