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
from collections import Counter
from collections.abc import Mapping

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
            counts = self._counts(hop, values)
            found = sum(counts.get(v, 0) for v in values)
            cached[wanted] = (found / len(values) if values else 1.0, len(values) < SAMPLE)
        return cached[wanted][0]

    def _counts(self, hop: Lookup, values: list[Values]) -> Counter[Values]:
        """How many live rows of `hop.table` each distinct one of `values` finds."""
        distinct = [v for v in dict.fromkeys(values) if all(x is not None or ns for x, ns in zip(v, hop.null_safe, strict=True))]
        if not distinct:
            return Counter()
        width = len(hop.columns)
        listed = ", ".join(f"c{i}" for i in range(width))
        on = " AND ".join(f"m.{ansi_ident(c)} {'IS' if ns else '='} w.c{i}" for i, (c, ns) in enumerate(zip(hop.columns, hop.null_safe, strict=True)))
        row = "(" + ", ".join("?" for _ in range(width)) + ")"
        found: Counter[Values] = Counter()
        per = max(1, 500 // width)
        with self._lock:
            for start in range(0, len(distinct), per):
                chunk = distinct[start : start + per]
                sql = (f"WITH w({listed}) AS (VALUES {', '.join(row for _ in chunk)}) SELECT {', '.join(f'w.c{i}' for i in range(width))}, count(*) "
                       f"FROM w CROSS JOIN {ansi_ident(f'm_{hop.table}')} AS m ON {on} AND m._del = 0 GROUP BY {listed}")  # fmt: skip
                for *key, count in self._db.execute(sql, [x for value in chunk for x in value]):
                    found[tuple(key)] = count
        return found

    def _fanouts_stale(self, table: str) -> None:
        """Rows were put into `table`: the hops from it or into it measured on a sample that held all of
        their source are measured again (a larger source's sample stands for it)."""
        for source, hops in self._fanouts.items():
            for hop in [h for h, (_, whole) in hops.items() if whole and (source == table or h[0] == table)]:
                del hops[hop]
