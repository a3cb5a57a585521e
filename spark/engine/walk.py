"""The views' walks (`lakemv.core.state.rounds`) run set-wise over the engine state: its spaces loaded
from the mirrors, and a batch's rounds of asks on the executors. Each round is one lookup in the
keyed store for every view's asks of that round; Python composes the plans, rows stay in the JVM.

The plans are the same size whatever the number of views: what differs per view and per hop (which
columns a hop asks by, which space it reads, where a key's values come from) is data, in small
broadcast tables joined to the rows, read by a fixed set of expressions. (Expressions per view - one
CASE branch each - made Spark's optimizer take seconds per round at 30 views.)

Encodings: `lakemv.spark.engine.encoding`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial, reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakemv.catalog.declarations import SourceTable
from lakemv.core.planner import ViewPlan, over
from lakemv.core.state.layout import NOT_CONSTANT, constant, derived_name, plain_column, route
from lakemv.core.state.rounds import Ask, Space, ViewWalk, Walks, number, walks
from lakemv.spark.engine.encoding import (
    JSON,
    RAW,
    ROW,
    asked,
    literal_array,
    order,
    packed_texts,
    parsed,
    pk_column_texts,
    pk_texts,
    position,
    tag,
    texts_in,
    texts_of,
    untag_each,
)
from lakemv.spark.engine.keyed import KeyedStore
from lakemv.spark.frames import local_frame


class Walker:
    """The state's spaces over `store`, numbered (`numbers`), and the walks of `plans` over them."""

    def __init__(self, store: KeyedStore, walks: Walks, numbers: Mapping[Space, int], sources: Mapping[str, SourceTable], plans: Sequence[ViewPlan]):
        self.store, self.walks, self.numbers, self.sources = store, walks, numbers, sources
        self.plans = {p.name: p for p in plans}
        self.ids = {w.view: i for i, w in enumerate(walks.views)}
        self.spark = store.spark
        self.derived = self._derived()
        self._kept: list[DataFrame] = []  # frames a walk persisted (each round reads the one before)
        self._moves = self._frames()

    @classmethod
    def of(cls, store: KeyedStore, plans: Sequence[ViewPlan], sources: Mapping[str, SourceTable], known: Mapping[Space, int] | None = None) -> Walker:
        """The walker of `plans` over `store`: their routes compiled, the spaces numbered (`known`: the
        numbers the state already gave its spaces)."""
        compiled = walks(plans, {p.name: route(p) for p in plans}, sources)
        numbers, _ = number(compiled.spaces, known or {})
        return cls(store, compiled, numbers, sources, plans)

    # ---- what is data: per table, per hop, per key --------------------------------------------
    def _derived(self) -> dict[str, dict[str, str]]:
        """Per table, the key expressions (name -> Spark SQL over the row) its rows carry: those its
        indexes are looked up by, and every key of a view anchored there that is neither a column nor a constant."""
        found: dict[str, dict[str, str]] = {t: {} for t in self.sources}
        for space in self.walks.spaces:
            if space.kind == "index":
                found[space.name].update(dict(space.derived))
        for w in self._walked():
            plan = self.plans[w.view]
            for branch in plan.anchors:
                for key in branch.keys:
                    if plain_column(key.expr) is None and constant(key.expr) is NOT_CONSTANT:
                        found[plan.occurrence(branch.anchor).table][derived_name(key.expr)] = key.expr
        return found

    def _types(self, space: Space) -> list[str]:
        """Each of a table space's columns' type class for comparing (a key expression's value: as it is)."""
        derived = dict(space.derived)
        source = self.sources[space.name]
        return [RAW if c in derived else source.column(c).spark_type.upper() for c in space.columns]

    def _ask_row(self, ask: Ask) -> tuple[int, list[str], list[str], list[bool]]:
        return self.numbers[ask.space], list(ask.using), self._types(ask.space), [not s for s in ask.null_safe]

    def _frames(self) -> dict[str, DataFrame]:
        """The broadcast tables the walks join: each hop up (`up`), where each walk's keys come from
        and what its anchors are asked (`ends`), each hop down (`down`)."""
        up, ends, down = [], [], []
        for w in self._walked():
            view = self.ids[w.view]
            for occ, hops in w.up.items():
                for step, i in enumerate(hops):
                    up.append((view, occ, step, *self._ask_row(self.walks.asks[i])))
                ends.append((view, occ, *self._key_spec(w, occ)))
            for child, (parent, i) in w.down.items():
                down.append((view, parent, child, *self._ask_row(self.walks.asks[i])))
        hop = "space INT, fields ARRAY<STRING>, types ARRAY<STRING>, strict ARRAY<BOOLEAN>"
        anchor = "ARRAY<STRUCT<occ: INT, space: INT, pos: ARRAY<INT>, types: ARRAY<STRING>, strict: ARRAY<BOOLEAN>>>"
        create = partial(local_frame, self.spark)
        tables = self.tables()
        indexes = []
        for space in self.walks.spaces:
            if space.kind == "index":
                fields = list(space.columns)
                indexes.append((tables.index(space.name), self.numbers[space], fields, self._types(space)))
        return {
            "indexes": create(indexes, "table INT, space INT, fields ARRAY<STRING>, types ARRAY<STRING>"),
            "up": create(up, f"view INT, occ INT, step INT, {hop}"),
            "ends": create(ends, f"view INT, occ INT, fields ARRAY<STRING>, literals ARRAY<STRING>, types ARRAY<STRING>, anchors {anchor}"),
            "down": create(down, f"view INT, occ INT, child INT, {hop}"),
        }

    def _key_spec(self, w: ViewWalk, occ: int) -> tuple:
        """Where a walk from `occ` ends up finding each key value - a field of the rows it ended on,
        or a constant - their type classes, and each anchor's ask as positions among the key values."""
        plan = self.plans[w.view]
        anchor = plan.anchor_of(occ)
        anchor_source = self.sources[plan.occurrence(anchor).table]
        at_anchor = len(w.up[occ]) == len(plan.chain(occ))
        fields, literals, types = [], [], []
        for key, carried in zip(plan.keys_at(anchor), w.key_columns[occ], strict=True):
            column = plain_column(key.expr)
            if not at_anchor:  # the columns the last link carries, compared as the anchor's columns
                fields.append(carried)
                literals.append(None)
                types.append(anchor_source.column(column).spark_type.upper() if column else RAW)
            elif column is not None:
                fields.append(column)
                literals.append(None)
                types.append(anchor_source.column(column).spark_type.upper())
            elif (value := constant(key.expr)) is not NOT_CONSTANT:
                fields.append(None)
                literals.append(None if value is None else ("true" if value else "false") if isinstance(value, bool) else str(value))
                types.append(RAW)
            else:
                fields.append(derived_name(key.expr))
                literals.append(None)
                types.append(RAW)
        values_by_name = {k.name: i for i, k in enumerate(plan.keys_at(anchor))}
        anchors = []
        for o, i in w.anchors.items():
            space, _, space_types, strict = self._ask_row(self.walks.asks[i])
            pos = [values_by_name[u] for u in self.walks.asks[i].using]
            anchors.append((o, space, pos, space_types, strict))
        # keys are packed in the view's key order (plan.key_names), whichever branch found them
        reorder = [values_by_name[n] for n in plan.key_names]
        return (
            [fields[i] for i in reorder],
            [literals[i] for i in reorder],
            [types[i] for i in reorder],
            [(o, s, [reorder.index(p) for p in pos], t, st) for o, s, pos, t, st in anchors],
        )

    def tables(self) -> list[str]:
        """The sources' names, sorted: a table's number in the frames the walks pass around."""
        return sorted(self.sources)

    def key_types(self, plan: ViewPlan) -> list[str]:
        """The type class each key value is compared by (`plan.key_names` order), as `reach` packs keys:
        a column of the anchor by its type, an expression or a constant by its text."""
        source = self.sources[plan.occurrence(plan.anchor).table]
        by_name = {k.name: plain_column(k.expr) for k in plan.keys_at(plan.anchor)}
        return [RAW if by_name[n] is None else source.column(by_name[n]).spark_type.upper() for n in plan.key_names]

    def _walked(self) -> list[ViewWalk]:
        return [w for w in self.walks.views if not w.whole]

    def keep(self, frame: DataFrame) -> DataFrame:
        """`frame`, persisted until `release` (a batch reads it more than once)."""
        self._kept.append(frame.persist())
        return frame

    def release(self) -> None:
        """Drops what the last walks persisted (once their results are used)."""
        for frame in self._kept:
            frame.unpersist()
        self._kept = []

    # ---- entries -------------------------------------------------------------------------------
    def packed_rows(self, table: str, rows: DataFrame, *keep: str, pk: bool = False) -> DataFrame:
        """`rows` (the table's columns) as `v`: their JSON with the key expressions' values (and the
        columns `keep` as they are); with `pk`, also `pk`: the row's primary key as `pk_texts` packs it,
        read off the columns where their types allow (not parsed back from `v`)."""
        source = self.sources[table]
        framed = rows.select(F.struct(*[F.col(c.name) for c in source.columns]).alias(ROW), *keep)
        fields = [F.col(ROW)[c.name].alias(c.name) for c in source.columns]
        fields += [F.expr(over(expression, ROW)).alias(name) for name, expression in sorted(self.derived[table].items())]
        off_columns = pk_column_texts(source, ROW) if pk else None
        packed = framed.select(
            F.to_json(F.struct(*fields), JSON).cast("binary").alias("v"), *keep, *([F.expr(off_columns).alias("pk")] if off_columns else [])
        )
        return packed.withColumn("pk", F.expr(pk_texts(source))) if pk and not off_columns else packed

    def entries(self, table: str, rows: DataFrame) -> DataFrame:
        """`(space, a, b, v, s)`: the entries of `rows` (the table's columns, and `_lmv_position` when it
        has it) in every space of the table: its rows by primary key (ordered by their positions) and each
        index of it."""
        packed = self.packed_rows(table, rows, *position(rows), pk=True)
        pk = "pk"
        parts = []
        for space in self.walks.spaces:
            if space.name != table or space.kind == "view":
                continue
            number = F.lit(self.numbers[space]).cast("int").alias("space")
            if space.kind == "rows":  # a row keeps its source position: an older change is not written over it
                parts.append(packed.select(number, F.expr(pk).alias("a"), F.lit(b"").cast("binary").alias("b"), "v", order(packed)))
            else:
                parts.append(
                    packed.select(
                        number, F.expr(self._index_key(space, "v")).alias("a"), F.expr(pk).alias("b"), "v", F.lit(None).cast("bigint").alias("s")
                    )
                )
        return reduce(DataFrame.unionByName, parts)

    def _index_key(self, space: Space, v: str) -> str:
        """SQL: a packed row's `a` in an index space."""
        fields = literal_array(list(space.columns), "STRING")
        return packed_texts(v, fields, literal_array(self._types(space), "STRING"))

    def apply(self, changes: Mapping[str, DataFrame], version: int) -> tuple[DataFrame, int]:
        """Writes a batch's rows: `changes` per table, its columns and `_lmv_deleted` (and `_lmv_position`,
        the change's source position, when it has it), one row per primary key (the latest change). Its
        rows by key are replaced over `version` (a deleted row's entry goes: a positioned one leaves a
        tombstone), returning the rows they replaced; a positioned change older than the row it would
        replace is not written (a snapshot's read of a row changed since, a replayed stretch of the
        stream): it gives that row as before and after. Then every index follows, over `version + 1`: an entry whose
        values changed moves (the old one goes), an unchanged one is rewritten with the new row.
        Returns `(images, version)`: every changed table's rows before and after, `(table, v)`, each the
        table's index among the sources' sorted names; and the version the state is at."""
        tables = self.tables()
        parts = []
        for table, rows in changes.items():
            number = F.lit(self.numbers[self._rows_space(table)]).cast("int")
            packed = self.packed_rows(table, rows, "_lmv_deleted", *position(rows), pk=True)
            parts.append(
                packed.select(
                    number.alias("space"),
                    F.col("pk").alias("a"),
                    F.lit(b"").cast("binary").alias("b"),
                    F.when(~F.col("_lmv_deleted"), F.col("v")).alias("v"),
                    order(packed),
                )
            )
        written = self.keep(self.store.update(reduce(DataFrame.unionByName, parts), version))
        version += 1
        table_of = F.element_at(
            F.create_map(*[x for t in changes for x in (F.lit(self.numbers[self._rows_space(t)]), F.lit(tables.index(t)))]), F.col("space")
        )
        # (a row's key as the rows space keys it is the key an index entry names: `b`)
        images = written.select(table_of.alias("table"), F.col("old").alias("old"), F.col("v").alias("new"), F.col("a").alias("pk"))
        # every index of the changed tables in one frame: a row per (change, index), by the indexes' data;
        # each image parsed once, before the join (not once per index and per use)
        parsed_images = images.select("*", F.expr(parsed("old")).alias("mo"), F.expr(parsed("new")).alias("mn"))
        indexed = parsed_images.join(F.broadcast(self._moves["indexes"]), "table")

        def packed(m: str, fields: str, types: str) -> Column:
            return F.expr(f"CAST(to_json({texts_in(m, fields, types)}) AS BINARY)")

        old_a, new_a = packed("mo", "fields", "types"), packed("mn", "fields", "types")
        pk = F.col("pk")
        moved = indexed.where(F.col("old").isNotNull() & (F.col("new").isNull() | ~old_a.eqNullSafe(new_a)))
        moves = moved.select("space", old_a.alias("a"), pk.alias("b"), F.lit(None).cast("binary").alias("v")).unionByName(
            indexed.where(F.col("new").isNotNull()).select("space", new_a.alias("a"), pk.alias("b"), F.col("new").alias("v"))
        )
        self.store.update(moves, version, blind=True).count()  # (what a move replaces is never read)
        version += 1
        both = images.select("table", F.explode(F.array("old", "new")).alias("v")).where(F.col("v").isNotNull())
        return both, version

    def _rows_space(self, table: str) -> Space:
        return next(s for s in self.walks.spaces if s.kind == "rows" and s.name == table)

    def load(self, tables: Mapping[str, DataFrame], version: int) -> int:
        """Writes every table's entries as version `version + 1`, sorted within the state's partitions
        (a bulk load: RocksDB takes keys in order fastest); the number of entries."""
        entries = reduce(DataFrame.unionByName, [self.entries(t, rows) for t, rows in tables.items()])
        entries = entries.repartition(self.store.partitions, "space", "a").sortWithinPartitions("space", "a", "b")
        return self.store.update(entries, version).count()

    # ---- rounds --------------------------------------------------------------------------------
    def _requests(self, frontier: DataFrame, moves: DataFrame, tag_names: Sequence[str]) -> DataFrame:
        """A round's asks `(space, a, tag)`: each frontier row, parsed (`m`), joined to its moves (the space,
        fields, types and strict flags of its hop, and the tag columns it goes on with). A row is parsed
        before the join, and once however many readers found it (`lookup(grouped=True)`): parsing was
        the most of a walk's CPU."""
        on = [c for c in frontier.columns if c in moves.columns and c != "v"]
        # the values read once (a projection of their own: `asked` reads them twice), and no filter of
        # a request that asks nothing (a NULL `a`: the lookup skips it; a filter read them once more)
        values = frontier.join(F.broadcast(moves), on).select(
            "space", F.expr(texts_in("m", "fields", "types")).alias("values"), "strict", tag(*[F.col(c) for c in tag_names]).alias("tag")
        )
        return values.select("space", F.expr(asked("values", "strict")).alias("a"), "tag")

    def reach(self, images: Mapping[str, DataFrame], version: int) -> DataFrame | None:
        """The keys the changes reach, every view's in one frame `(view, k, asks)`: `k` a key's values
        (packed), `asks` what the view's anchors are asked for it. `images` are each changed table's
        rows before and after the batch (its columns); the hops read the state at `version` (the rows
        as they are after the batch), every view's hops of a round in one lookup. None: no view reads them."""
        tables = self.tables()
        packed = [self.packed_rows(t, rows).select(F.lit(tables.index(t)).alias("table"), "v") for t, rows in images.items()]
        return self.reach_packed(reduce(DataFrame.unionByName, packed), version) if packed else None

    def reach_packed(self, images: DataFrame, version: int) -> DataFrame | None:
        """`reach` from packed images `(table, v)` (`apply`'s)."""
        tables = self.tables()
        readers = [(tables.index(self.plans[w.view].occurrence(occ).table), self.ids[w.view], occ) for w in self._walked() for occ in w.up]
        if not readers:
            return None
        readers_frame = F.broadcast(local_frame(self.spark, readers, "table INT, view INT, occ INT"))
        # a changed row is parsed once, not once for each occurrence that reads it
        frontier = images.withColumn("m", F.expr(parsed("v"))).join(readers_frame, "table").select("view", "occ", F.lit(0).alias("step"), "v", "m")
        up = self._moves["up"]
        done = []
        for _ in range(max((w.up_rounds for w in self._walked()), default=0)):
            done.append(frontier.join(F.broadcast(up.select("view", "occ", "step")), ["view", "occ", "step"], "left_anti"))
            # a row found is parsed once, however many readers' walks found it, then carried for each
            found = self.store.lookup(self._requests(frontier, up, ["view", "occ", "step"]), version, grouped=True)
            read = found.where(F.col("v").isNotNull()).select("v", F.expr(parsed("v")).alias("m"), "tags")
            each = untag_each(read, ["view", "occ", "step"], "v", "m")
            frontier = self.keep(each.select("view", "occ", (F.col("step") + 1).alias("step"), "v", "m"))
        done.append(frontier)
        ended = reduce(DataFrame.unionByName, [d.select("view", "occ", "m") for d in done])
        keyed = ended.join(F.broadcast(self._moves["ends"]), ["view", "occ"]).select(
            "view",
            "anchors",
            F.expr(f"zip_with({texts_in('m', 'fields', 'types')}, literals, (x, l) -> coalesce(x, l))").alias("values"),
        )
        pos = "transform(anchor.pos, i -> values[i])"
        asks = f"transform(anchors, anchor -> named_struct('occ', anchor.occ, 'space', anchor.space, 'a', {asked(texts_of(pos, 'anchor.types'), 'anchor.strict')}))"
        keys = keyed.select("view", F.expr("CAST(to_json(values) AS BINARY)").alias("k"), F.expr(asks).alias("asks"))
        return self.keep(keys.dropDuplicates(["view", "k"]))

    def gather(self, keys: DataFrame, version: int) -> DataFrame:
        """`(view, occ, v)`: the rows each occurrence of each view reads for its keys (`reach`'s frame):
        `gather_grouped`'s rows, one for each occurrence that reads it."""
        return untag_each(self.gather_grouped(keys, version), ["view", "occ"], "v")

    def gather_grouped(self, keys: DataFrame, version: int) -> DataFrame:
        """`(tags, v)`: each row the views' occurrences read for their keys (`reach`'s frame) once a depth,
        with every occurrence that reads it (`tags`: `tag(view, occ)` each): the anchors' rows by the
        keys, then each link's rows from its parent's, a depth a round. A row many views read (the same
        user for every view keyed by users) is looked up, parsed and carried once, not once a view."""
        requests = keys.select("view", F.explode("asks").alias("ask")).select("view", "ask.*")
        requests = requests.select("space", "a", tag(F.col("view"), F.col("occ")).alias("tag"))  # a NULL `a` asks nothing
        found = self.store.lookup(requests, version, grouped=True)
        level = self.keep(found.where(F.col("v").isNotNull()).select("tags", "v"))
        gathered = [level]
        down = self._moves["down"]
        for _ in range(max((max(w.depth.values(), default=0) for w in self._walked()), default=0)):
            # parsed once, then one row per occurrence that read it, each asking by its own moves
            frontier = untag_each(level.select(F.expr(parsed("v")).alias("m"), "tags"), ["view", "occ"], "m")
            found = self.store.lookup(self._requests(frontier, down, ["view", "child"]), version, grouped=True)
            level = self.keep(found.where(F.col("v").isNotNull()).select("tags", "v"))
            gathered.append(level)
        return reduce(DataFrame.unionByName, gathered)
