"""How many rows a hop finds per row it starts from: the estimate the cost model sizes a view's
maintenance by (`lakemv.core.state.walk.estimated_rows`, `estimated_reach`). Never used for results.

A hop's rows per row are measured on a sample of the rows it starts from: the first `SAMPLE` live rows
of its source in primary-key order, an order unrelated to the hop's values, and for each of their
values how many rows the hop's lookup finds (one statement, counted in the index, no row read). A
sample of an index in its own order would start at one end of its values instead: at 1M users the
first authors in order wrote 2,500 pull requests each, against 2.1 per user on average. Rows the
lookup cannot match (a NULL compared with `=`) count as none, as the walks find none.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence

from lakemv.core.sql.quote import ansi_ident
from lakemv.core.state.codec import Values, decode, index_value
from lakemv.core.state.layout import Lookup, MirrorPart

SAMPLE = 1_000  # rows of a hop's source it is measured on


class Fanouts:
    """Each hop's rows per source row, measured once per store (a source smaller than the sample again
    after rows are put into it). `Store` holds these methods; they use its connection and lock."""

    _db: sqlite3.Connection
    _lock: threading.RLock
    _fanouts: dict[str, dict[tuple[object, ...], tuple[float, bool]]]

    @property
    def mirrors(self) -> Mapping[str, MirrorPart]: ...

    def count_per_value(self, table: str, columns: Sequence[str], values: Iterable[Values], null_safe: Sequence[bool]) -> dict[Values, int]: ...

    def fanout(self, source: str, hop: Lookup) -> float:
        """About how many live rows `hop` finds from one live row of `source` (see the module docstring)."""
        wanted = (hop.table, hop.columns, hop.using, hop.null_safe)
        cached = self._fanouts.setdefault(source, {})
        if wanted not in cached:
            part = self.mirrors[source]
            positions = [part.column_names.index(c) for c in hop.using]
            with self._lock:
                blobs = [r[0] for r in self._db.execute(f"SELECT _row FROM {ansi_ident(f'm_{source}')} WHERE _del = 0 LIMIT {SAMPLE}")]
            values = [tuple(index_value(row[i]) for i in positions) for row in map(decode, blobs)]
            counts = self.count_per_value(hop.table, hop.columns, values, hop.null_safe)
            found = sum(counts.get(v, 0) for v in values)
            cached[wanted] = (found / len(values) if values else 1.0, len(values) < SAMPLE)
        return cached[wanted][0]

    def _fanouts_stale(self, table: str) -> None:
        """Rows were put into `table`: the hops from it or into it measured on a sample that held all of
        their source are measured again (a larger source's sample stands for it)."""
        for source, hops in self._fanouts.items():
            for hop in [h for h, (_, whole) in hops.items() if whole and (source == table or h[0] == table)]:
                del hops[hop]
