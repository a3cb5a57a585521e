"""Every view's route compiled into the engine state's spaces and the lookups a batch makes. Pure.

The engine's state (`lakemv.spark.engine`) is one keyed store over Spark's state stores: entries
`(space, a, b) -> v`, read by `(space, a)`. A space is one of
- a table's rows by primary key (`a` the key, `v` the row): old images and the position guard;
- an index of a table by a column set, covering: `a` those columns' values, `b` the row's primary key,
  `v` the row, so a hop finds its rows in one read. Views looking a table up by the same columns share
  it; a key that is an expression (`date_trunc('MONTH', registered_at)`) indexes its anchor by the
  expression's value (`Space.derived`);
- a view's row digests by key.

Spaces are numbered once and keep their numbers (`number`): a new view adds only the spaces no other
view has, and a space no view uses any more is dropped, so the state is never rebuilt for a view.

A lookup (`Ask`) is a kind of read: rows of one table (or a view's keys), their `using` columns cast to
the space's column types, read in one space. Every view whose route crosses the same hop asks the same
kind, so a value asked by many views is read once. A view's walk (`ViewWalk`) names its asks hop by hop:
up from each occurrence to the keys a change reaches, then from the keys down the link tree to the rows
its recompute reads. A batch's rounds are the longest of those paths, shared by every view.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from lakemv.catalog.declarations import SourceTable
from lakemv.core.planner import ViewPlan
from lakemv.core.state.layout import Lookup, Route

SpaceKind = Literal["rows", "index", "view"]
KEYS = "keys"  # the source of an anchor's ask: a view's keys, by the key columns' names


class Space(BaseModel):
    """One space of the state. `name`: the table (rows, index) or the view; `columns`: the primary key
    (rows), the looked-up columns in sorted order (index), the view's key (view)."""

    model_config = ConfigDict(frozen=True)

    kind: SpaceKind
    name: str
    columns: tuple[str, ...]
    derived: tuple[tuple[str, str], ...] = ()  # index: (column, Spark SQL over the row qualified by SELF) of columns that are expressions

    @property
    def label(self) -> str:
        return f"{self.kind} {self.name}({', '.join(self.columns)})"


class Ask(BaseModel):
    """A kind of read: each row of `source` (a table, or `KEYS`: a view's keys, by their names) asks `space`
    for the entries whose columns equal its `using` columns, pairwise (`null_safe`: NULL matches NULL;
    otherwise a row with a NULL among them asks nothing)."""

    model_config = ConfigDict(frozen=True)

    source: str
    using: tuple[str, ...]  # in the order of the space's columns
    space: Space
    null_safe: tuple[bool, ...]
    exact: bool  # every equality of the link is used (else a superset is found, which the view's SQL filters)


class ViewWalk(BaseModel):
    """How a batch reaches one view's keys and gathers their rows, as asks (indexes into `Walks.asks`).
    A view whose route cannot be looked up is recomputed whole (`whole`, with the reason)."""

    model_config = ConfigDict(frozen=True)

    view: str
    digests: Space
    whole: str | None = None
    up: Mapping[int, tuple[int, ...]] = {}  # occurrence -> its asks up to the anchor, hop by hop
    key_columns: Mapping[int, tuple[str | None, ...]] = {}  # occurrence -> the columns holding each key after its hops
    anchors: Mapping[int, int] = {}  # anchor occurrence -> the ask finding its rows by the keys
    down: Mapping[int, tuple[int, int]] = {}  # child occurrence -> (parent occurrence, the ask finding its rows from the parent's)
    depth: Mapping[int, int] = {}  # occurrence -> links between it and its anchor
    exact: bool = False  # its anchors are found by exactly its keys (`Route.exact_keys`): a recompute has rows of those keys only

    @property
    def up_rounds(self) -> int:
        """Reads up from a change to the keys it reaches: the longest chain of hops."""
        return max((len(hops) for hops in self.up.values()), default=0)

    @property
    def down_rounds(self) -> int:
        """Reads from the keys to every row the recompute needs: the anchor's, then one per link depth."""
        return 0 if self.whole else 1 + max(self.depth.values(), default=0)


class Walks(BaseModel):
    """The walks of every view over the spaces they need, with the asks they share."""

    model_config = ConfigDict(frozen=True)

    spaces: tuple[Space, ...]
    asks: tuple[Ask, ...]
    views: tuple[ViewWalk, ...]

    @property
    def rounds(self) -> int:
        """A batch's lookup rounds when every view is reached, whatever the number of views: each round
        reads what every view asks next, so it is the longest walk, up then down, of any one view."""
        return max((v.up_rounds + v.down_rounds for v in self.views if not v.whole), default=0)

    def view(self, name: str) -> ViewWalk:
        return next(v for v in self.views if v.view == name)


def _table_space(source: SourceTable, lookup: Lookup, derived: Mapping[str, str]) -> tuple[Space, tuple[int, ...]]:
    """The space a lookup reads - the table's rows when it looks up by the whole primary key, else the
    index by its columns - and for each of the space's columns the lookup's position."""
    pk = tuple(source.primary_key)
    if sorted(lookup.columns) == sorted(pk):
        return Space(kind="rows", name=source.name, columns=pk), tuple(lookup.columns.index(c) for c in pk)
    order = sorted(range(len(lookup.columns)), key=lambda i: lookup.columns[i])
    columns = tuple(lookup.columns[i] for i in order)
    found = tuple((c, derived[c]) for c in columns if c in derived)
    return Space(kind="index", name=source.name, columns=columns, derived=found), tuple(order)


def walks(plans: Sequence[ViewPlan], routes: Mapping[str, Route], sources: Mapping[str, SourceTable]) -> Walks:
    """Every view's walk over shared spaces and asks. The spaces: each table's rows, each index a
    route reads, each view's digests."""
    spaces: dict[Space, None] = {Space(kind="rows", name=t, columns=tuple(s.primary_key)): None for t, s in sorted(sources.items())}
    asks: dict[Ask, int] = {}

    def ask(source: str, lookup: Lookup, derived: Mapping[str, str]) -> int:
        space, order = _table_space(sources[lookup.table], lookup, derived)
        spaces.setdefault(space)
        found = Ask(
            source=source,
            using=tuple(lookup.using[i] for i in order),
            space=space,
            null_safe=tuple(lookup.null_safe[i] for i in order),
            exact=lookup.exact,
        )
        return asks.setdefault(found, len(asks))

    views = []
    for plan in plans:
        route = routes[plan.name]
        digests = Space(kind="view", name=plan.name, columns=plan.key_names)
        spaces.setdefault(digests)
        if not route.indexed:
            views.append(ViewWalk(view=plan.name, digests=digests, whole=route.reason or "its route cannot be looked up"))
            continue
        up = {}
        for occ in plan.occurrences:
            table, hops = occ.table, []
            for hop in route.up[occ.id]:
                hops.append(ask(table, hop, {}))
                table = hop.table
            up[occ.id] = tuple(hops)
        anchors = {occ: ask(KEYS, lookup, route.derived) for occ, lookup in route.anchors.items()}
        down = {link.child: (link.parent, ask(plan.occurrence(link.parent).table, route.down[link.child], {})) for link in plan.links}
        views.append(
            ViewWalk(
                view=plan.name,
                digests=digests,
                up=up,
                key_columns=dict(route.key_columns),
                anchors=anchors,
                down=down,
                depth={occ.id: len(plan.chain(occ.id)) for occ in plan.occurrences},
                exact=route.exact_keys,
            )
        )
    return Walks(spaces=tuple(spaces), asks=tuple(asks), views=tuple(views))


def number(needed: Iterable[Space], known: Mapping[Space, int], issued: int = 0) -> tuple[dict[Space, int], list[tuple[Space, int]]]:
    """(numbers, dropped): every needed space's number - its known one, else the next above every
    number issued so far (`issued`, and the known ones): a number is never reused, so entries of a
    dropped space are never read as a new one's - and the known spaces no longer needed."""
    needed = list(dict.fromkeys(needed))
    numbers = {space: known[space] for space in needed if space in known}
    free = max([issued, *known.values()]) + 1
    for space in needed:
        if space not in numbers:
            numbers[space] = free
            free += 1
    dropped = sorted(((s, n) for s, n in known.items() if s not in numbers), key=lambda item: item[1])
    return numbers, dropped
