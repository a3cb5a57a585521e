"""The views' walks (`lakemv.core.state.rounds`) run set-wise over the engine state: its spaces loaded
from the mirrors, and a batch's rounds of asks on the executors. Each round is one lookup in the
keyed store for every view's asks of that round; Python composes the plans, rows stay in the JVM.

Encodings, the same on both sides of every read:
- a row (`v`) is the JSON of the table's row in its declared types, timestamps to the microsecond;
- an entry's `a` (the looked-up values) and `b` (the primary key) are the JSON of the values by
  position, each cast to the type of the space's column (so a join of a bigint and an int column finds
  its rows); a derived column's value is the key expression's over the row.
A read whose values hold a NULL where the link's equality is not null-safe asks nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakemv.catalog.declarations import SourceTable
from lakemv.core.planner import ViewPlan, over
from lakemv.core.state.rounds import KEYS, Ask, Space, ViewWalk, Walks
from lakemv.spark.engine.keyed import KeyedStore

JSON = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX", "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"}
ROW = "_lmv_row"  # the struct column of a table's row while an entry or an ask is made from it


def row_schema(source: SourceTable) -> str:
    return "STRUCT<" + ", ".join(f"`{c.name}`: {c.spark_type}" for c in source.columns) + ">"


def packed(values: Sequence[Column]) -> Column:
    """Values by position as bytes (an entry's `a` or `b`)."""
    return F.to_json(F.struct(*[v.alias(f"_{i}") for i, v in enumerate(values)]), JSON).cast("binary")


def row_bytes(source: SourceTable, row: Column) -> Column:
    """A row (a struct of the table's columns) as an entry's `v`."""
    return F.to_json(F.struct(*[row[c.name].alias(c.name) for c in source.columns]), JSON).cast("binary")


def row_of(source: SourceTable, v: Column) -> Column:
    """An entry's `v` as the table's row (a struct)."""
    return F.from_json(v.cast("string"), row_schema(source), JSON)


def _tag(*values: Column) -> Column:
    return F.to_json(F.struct(*[v.alias(f"_{i}") for i, v in enumerate(values)])).cast("binary")


def _untag(tag: Column, names: Sequence[str]) -> list[Column]:
    parsed = F.from_json(tag.cast("string"), "STRUCT<" + ", ".join(f"_{i}: INT" for i in range(len(names))) + ">")
    return [parsed[f"_{i}"].alias(name) for i, name in enumerate(names)]


class Walker:
    """The state's spaces over `store`, numbered (`numbers`), and the walks of `plans` over them."""

    def __init__(self, store: KeyedStore, walks: Walks, numbers: Mapping[Space, int], sources: Mapping[str, SourceTable], plans: Sequence[ViewPlan]):
        self.store, self.walks, self.numbers, self.sources = store, walks, numbers, sources
        self.plans = {p.name: p for p in plans}
        self.ids = {w.view: i for i, w in enumerate(walks.views)}
        self.spark = store.spark
        self._kept: list[DataFrame] = []  # frames a walk persisted (each round reads the one before)

    def _keep(self, frame: DataFrame) -> DataFrame:
        self._kept.append(frame.persist())
        return frame

    def release(self) -> None:
        """Drops what the last walks persisted (once their results are used)."""
        for frame in self._kept:
            frame.unpersist()
        self._kept = []

    # ---- entries -------------------------------------------------------------------------------
    def _types(self, space: Space) -> list[str | None]:
        """Each column's type in the space (None: a derived column, typed by its expression)."""
        derived = dict(space.derived)
        source = self.sources[space.name]
        return [None if c in derived else source.column(c).spark_type for c in space.columns]

    def _values(self, space: Space, row: Column) -> list[Column]:
        """The space's columns of a table's row: its own columns, or a derived column's expression over it."""
        derived = dict(space.derived)
        return [F.expr(over(derived[c], ROW)) if c in derived else row[c] for c in space.columns]

    def entries(self, table: str, rows: DataFrame) -> DataFrame:
        """`(space, a, b, v)`: the entries of `rows` (the table's columns) in every space of the table:
        its rows by primary key and each index of it."""
        source = self.sources[table]
        framed = rows.select(F.struct(*[F.col(c.name) for c in source.columns]).alias(ROW))
        row = F.col(ROW)
        v, pk = row_bytes(source, row), packed([row[c] for c in source.primary_key])
        parts = []
        for space in self.walks.spaces:
            if space.name != table or space.kind == "view":
                continue
            number = F.lit(self.numbers[space]).cast("int")
            if space.kind == "rows":
                parts.append(framed.select(number.alias("space"), pk.alias("a"), F.lit(b"").cast("binary").alias("b"), v.alias("v")))
            else:
                parts.append(framed.select(number.alias("space"), packed(self._values(space, row)).alias("a"), pk.alias("b"), v.alias("v")))
        return reduce(DataFrame.unionByName, parts)

    def load(self, tables: Mapping[str, DataFrame], version: int) -> int:
        """Writes every table's entries as version `version + 1`, sorted within the state's partitions
        (a bulk load: RocksDB takes keys in order fastest); the number of entries."""
        entries = reduce(DataFrame.unionByName, [self.entries(t, rows) for t, rows in tables.items()])
        entries = entries.repartition(self.store.partitions, "space", "a").sortWithinPartitions("space", "a", "b")
        return self.store.update(entries, version).count()

    # ---- asks ----------------------------------------------------------------------------------
    def _asked(self, ask: Ask, values: Sequence[Column]) -> Column:
        """An ask's `a` from the asker's values (its `using`, in order); NULL when a value is NULL where
        the equality is not null-safe (it asks nothing)."""
        cast = [v if t is None else v.cast(t) for v, t in zip(values, self._types(ask.space), strict=True)]
        strict = [v for v, safe in zip(values, ask.null_safe, strict=True) if not safe]
        a = packed(cast)
        return a if not strict else F.when(reduce(lambda x, y: x & y, [v.isNotNull() for v in strict]), a)

    def _round(self, frontier: DataFrame, moves: DataFrame, tag_names: Sequence[str], version: int) -> DataFrame:
        """One round: each frontier row `(v, ...)` joined to its move (`ask` id and the tag columns it
        goes on with) asks its ask's space; the rows found, `(tag columns..., space, b, v)`."""
        asked = frontier.join(F.broadcast(moves), [c for c in frontier.columns if c in moves.columns and c != "v"])
        cases = None
        for i, ask in enumerate(self.walks.asks):
            if ask.source == KEYS:
                continue
            row = row_of(self.sources[ask.source], F.col("v"))
            value = self._asked(ask, [row[u] for u in ask.using])
            cases = F.when(F.col("ask") == i, value) if cases is None else cases.when(F.col("ask") == i, value)
        spaces = F.element_at(
            F.create_map(*[x for i, a in enumerate(self.walks.asks) for x in (F.lit(i), F.lit(self.numbers[a.space]))]), F.col("ask")
        )
        requests = asked.select(spaces.cast("int").alias("space"), cases.alias("a"), _tag(*[F.col(c) for c in tag_names]).alias("tag"))
        found = self.store.lookup(requests.where(F.col("a").isNotNull()), version)
        return found.where(F.col("v").isNotNull()).select(*_untag(F.col("tag"), tag_names), "space", "b", "v")

    # ---- reach ---------------------------------------------------------------------------------
    def reach(self, images: Mapping[str, DataFrame], version: int) -> dict[str, DataFrame]:
        """Per view the changes reach, its keys (a frame of its key columns, distinct): `images` are each
        changed table's rows before and after the batch (its columns); the hops read the state at
        `version` (the rows as they are after the batch), every view's hops of a depth in one round."""
        starts = []
        for table, rows in images.items():
            source = self.sources[table]
            readers = [(self.ids[w.view], occ) for w in self._walked() for occ in w.up if self.plans[w.view].occurrence(occ).table == table]
            if not readers:
                continue
            framed = rows.select(row_bytes(source, F.struct(*[F.col(c.name) for c in source.columns])).alias("v"))
            starts.append(framed.crossJoin(F.broadcast(self.spark.createDataFrame(readers, "view INT, occ INT"))).withColumn("step", F.lit(0)))
        if not starts:
            return {}
        frontier = reduce(DataFrame.unionByName, starts)
        moves = [(self.ids[w.view], occ, step, ask) for w in self._walked() for occ, hops in w.up.items() for step, ask in enumerate(hops)]
        done = []
        for _ in range(max((w.up_rounds for w in self._walked()), default=0)):
            if not moves:
                break
            move_frame = self.spark.createDataFrame(moves, "view INT, occ INT, step INT, ask INT")
            ended = frontier.join(F.broadcast(move_frame.select("view", "occ", "step")), ["view", "occ", "step"], "left_anti")
            done.append(ended)
            found = self._round(frontier, move_frame, ["view", "occ", "step"], version)
            frontier = self._keep(found.select("view", "occ", (F.col("step") + 1).alias("step"), "v"))
        done.append(frontier)
        ended = self._keep(reduce(DataFrame.unionByName, [d.select("view", "occ", "v") for d in done]))
        return {w.view: self._keys(w, ended.where(F.col("view") == self.ids[w.view])) for w in self._walked()}

    def _walked(self) -> list[ViewWalk]:
        return [w for w in self.walks.views if not w.whole]

    def _keys(self, walk: ViewWalk, ended: DataFrame) -> DataFrame:
        """A view's keys from the rows its walks ended on: the key columns an occurrence's last link
        carries, cast to the key's type, or the key expressions over the anchor's rows."""
        plan = self.plans[walk.view]
        parts = []
        for occ, columns in walk.key_columns.items():
            hops = walk.up[occ]
            table = self.walks.asks[hops[-1]].space.name if hops else plan.occurrence(occ).table
            row = row_of(self.sources[table], F.col("v"))
            anchor = plan.anchor_of(occ)
            at_anchor = len(hops) == len(plan.chain(occ))
            rows = ended.where(F.col("occ") == occ).select(row.alias(ROW))
            if at_anchor:
                values = [F.expr(over(k.expr, ROW)).alias(k.name) for k in plan.keys_at(anchor)]
            else:
                anchor_source = self.sources[plan.occurrence(anchor).table]
                values = [
                    F.col(ROW)[c].cast(anchor_source.column(_anchor_column(k.expr)).spark_type).alias(k.name)
                    for k, c in zip(plan.keys_at(anchor), columns, strict=True)
                ]
            parts.append(rows.select(*values))
        return reduce(DataFrame.unionByName, parts).distinct()

    # ---- gather --------------------------------------------------------------------------------
    def gather(self, keys: Mapping[str, DataFrame], version: int) -> dict[str, dict[int, DataFrame]]:
        """Per view, per occurrence, the rows its recompute reads for `keys` (each view's key frame):
        the anchors' rows by the keys, then each link's rows from its parent's, a depth per round."""
        walks = {w.view: w for w in self._walked() if w.view in keys}
        requests = []
        for name, walk in walks.items():
            for occ, i in walk.anchors.items():
                ask = self.walks.asks[i]
                a = self._asked(ask, [F.col(u) for u in ask.using])
                requests.append(
                    keys[name].select(
                        F.lit(self.numbers[ask.space]).cast("int").alias("space"), a.alias("a"), _tag(F.lit(self.ids[name]), F.lit(occ)).alias("tag")
                    )
                )
        if not requests:
            return {}
        found = self.store.lookup(reduce(DataFrame.unionByName, requests).where(F.col("a").isNotNull()), version)
        level = self._keep(found.where(F.col("v").isNotNull()).select(*_untag(F.col("tag"), ["view", "occ"]), "v"))
        gathered = [level]
        moves = [(self.ids[n], parent, child, i) for n, w in walks.items() for child, (parent, i) in w.down.items()]
        for _ in range(max((max(w.depth.values(), default=0) for w in walks.values()), default=0)):
            move_frame = self.spark.createDataFrame(moves, "view INT, occ INT, child INT, ask INT")
            found = self._round(level, move_frame, ["view", "child"], version)
            level = self._keep(found.select("view", F.col("child").alias("occ"), "v"))
            gathered.append(level)
        rows = reduce(DataFrame.unionByName, gathered)
        out: dict[str, dict[int, DataFrame]] = {}
        for name, walk in walks.items():
            plan = self.plans[name]
            out[name] = {
                occ.id: rows.where((F.col("view") == self.ids[name]) & (F.col("occ") == occ.id))
                .select(row_of(self.sources[occ.table], F.col("v")).alias(ROW))
                .select(f"{ROW}.*")
                for occ in plan.occurrences
            }
        return out


def _anchor_column(expression: str) -> str:
    from lakemv.core.state.layout import plain_column

    column = plain_column(expression)
    assert column is not None, expression  # a carried key is a plain column of the anchor (lakemv.core.state.layout.route)
    return column
