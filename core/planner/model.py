"""The plan model: how a view is maintained, as frozen data that `lakemv.core.sql.viewsql` renders to SQL."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from functools import cached_property

import sqlglot
from pydantic import BaseModel, ConfigDict
from sqlglot import exp

from lakemv.catalog.declarations import ViewSource
from lakemv.core.planner.bounds import TimeBound
from lakemv.core.planner.definitions import ViewDefinition
from lakemv.core.planner.finality import Finality
from lakemv.core.planner.sqltools import _is_aggregated, select_from

SELF = "_lmv_self"  # qualifier of the columns in a stored expression; replaced by an alias when rendered
OCCURRENCE = "_lmv_occ_{}"  # placeholder relation name of an occurrence in the plan's body


class Occurrence(BaseModel):
    """One read of a source table in the view's SQL."""

    model_config = ConfigDict(frozen=True)

    id: int
    table: str
    alias: str
    context: str  # where in the SQL: "main query", "CTE starred", "subquery `...`"


class Link(BaseModel):
    """Equalities tying `child` to `parent`: pairs of (expression over child, expression over parent)."""

    model_config = ConfigDict(frozen=True)

    child: int
    parent: int
    pairs: tuple[tuple[str, str, str], ...]  # (expression over child, over parent, "=" or "<=>")
    fragments: tuple[str, ...]
    unique: bool = False  # the pairs equate a unique key of the child's table: at most one child row per parent row


class KeyColumn(BaseModel):
    """A view key column and the expression over the anchor occurrence that computes it."""

    model_config = ConfigDict(frozen=True)

    name: str
    expr: str


def holds_columns(keys: Sequence[KeyColumn], columns: Sequence[str]) -> bool:
    """Whether the key columns include each of the anchor's `columns` unchanged (e.g. its primary
    key: then one key is at most one anchor row)."""
    own = {k.expr for k in keys}
    return all(exp.column(c, table=SELF).sql(dialect="spark") in own for c in columns)


class Grain(BaseModel):
    """A table of the view each of whose rows is at most one joined row, its primary key, and the tree of
    links from it to every other table, each matching a unique key (`lakemv.core.planner.keys`)."""

    model_config = ConfigDict(frozen=True)

    anchor: int
    keys: tuple[KeyColumn, ...]
    links: tuple[Link, ...]  # parents before children


class Branch(BaseModel):
    """One branch of a UNION ALL view: its anchor and the expressions of the key columns over it (a
    constant for the column that tells the branches apart)."""

    model_config = ConfigDict(frozen=True)

    anchor: int
    keys: tuple[KeyColumn, ...]


class ViewPlan(BaseModel):
    """How a view is maintained: its anchor, the link tree over every occurrence, and its SQL body.

    A UNION ALL view has one anchor and link tree per branch (`branches`; `anchor` and `keys` are the
    first branch's): a changed row reaches the keys of its own branch, and a key is recomputed by every
    branch, of which only its own can produce rows (the branches' keys differ in a constant)."""

    model_config = ConfigDict(frozen=True)

    definition: ViewDefinition
    anchor: int
    keys: tuple[KeyColumn, ...]
    occurrences: tuple[Occurrence, ...]
    links: tuple[Link, ...]  # one per occurrence except the anchors, parents before children
    columns: tuple[str, ...]  # output columns, in order
    body: str  # qualified Spark SQL, CTEs inlined, each source read as OCCURRENCE.format(id)
    branches: tuple[Branch, ...] = ()  # a UNION ALL's branches (empty: one SELECT)
    finality: Finality | None = None  # keyed by an event-time window: `window_final` ends `columns`
    event_columns: tuple[str, ...] = ()  # as of processing: the output columns only the event gives
    bound: TimeBound | None = None  # two event streams joined within a time bound
    anchor_time: str | None = None  # the output column passing the anchor event's time through, if any
    inputs: tuple[ViewSource, ...] = ()  # the views it reads (lakemv.core.planner.dag), as tables
    grain: Grain | None = None  # when its key's tree fans out: a table whose rows are its joined rows

    def at_grain(self) -> ViewPlan:
        """The plan rooted at its grain, keyed by the grain's primary key: each of the grain's rows one
        joined row, found from the changed rows of any table (aggregates by delta over a join that fans out)."""
        assert self.grain is not None
        return self.model_copy(update={"anchor": self.grain.anchor, "keys": self.grain.keys, "links": self.grain.links, "grain": None})

    @property
    def anchors(self) -> tuple[Branch, ...]:
        """Every anchor with its key expressions: the branches, or the one anchor."""
        return self.branches or (Branch(anchor=self.anchor, keys=self.keys),)

    def keys_at(self, anchor: int) -> tuple[KeyColumn, ...]:
        """The key expressions over `anchor` (one of `anchors`)."""
        return next(b.keys for b in self.anchors if b.anchor == anchor)

    def anchor_of(self, occ_id: int) -> int:
        """The anchor whose link tree `occ_id` belongs to."""
        chain = self.chain(occ_id)
        return chain[-1].parent if chain else occ_id

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def fingerprint(self) -> str:
        """What the view table was built from: the definition, and for a windowed view the lateness
        its windows are judged final by (a new lateness rebuilds it: flags set by the old one go)."""
        own = self.definition.fingerprint if self.finality is None else f"{self.definition.fingerprint[:16]}-{self.finality.version}"
        if not self.inputs:
            return own
        upstream = "|".join(f"{v.name}={v.fingerprint}" for v in sorted(self.inputs, key=lambda v: v.name))
        return f"{own[:16]}-{hashlib.sha256(upstream.encode()).hexdigest()[:8]}"  # a view it reads rebuilt: rebuilt too

    @property
    def upstream(self) -> tuple[str, ...]:
        """The views it reads, by name."""
        return tuple(v.name for v in self.inputs)

    @property
    def as_of_processing(self) -> bool:
        """Each event's row is computed once, with the tables as they were then (`-- @enrich`)."""
        return self.definition.enrich == "as_of_processing"

    @property
    def compared(self) -> tuple[str, ...] | None:
        """The columns an independent recompute can check beyond the key (None: all of them)."""
        return self.event_columns if self.as_of_processing else None

    def reached_by(self, table: str) -> bool:
        """Whether a change to `table` can change the view's rows: an as-of-processing view follows
        only its anchor's events, never the tables they were enriched from."""
        return not self.as_of_processing or self.occurrence(self.anchor).table == table

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.keys)

    @property
    def tables(self) -> tuple[str, ...]:
        """Source tables the view reads, in first-read order."""
        return tuple(dict.fromkeys(o.table for o in self.occurrences))

    def reads(self, table: str) -> frozenset[str]:
        """Columns of `table` the view's SQL mentions (through any alias of a read of it)."""
        return self._columns_read.get(table, frozenset())

    @cached_property
    def reads_known(self) -> bool:
        """Whether `reads` names every column the body can read: each column qualified by its alias,
        and no `*` (but `count(*)`'s). Then an update of other columns cannot change the view."""
        tree = sqlglot.parse_one(self.body, read="spark")
        if any(not isinstance(star.parent, exp.Count) for star in tree.find_all(exp.Star)):
            return False
        return all(column.table for column in tree.find_all(exp.Column))

    @cached_property
    def empty_over_empty(self) -> bool:
        """Whether the view has no rows while every table it reads is empty: each of its rows comes from
        rows of those tables. Not so when a relation in it is an aggregate with no GROUP BY (one row over
        no input) or a SELECT with no FROM, or it has VALUES or reads something else (a table function);
        a scalar subquery (`(SELECT count(*) ...)` in a column) gives a value per row, not rows."""
        tree = sqlglot.parse_one(self.body, read="spark")
        if tree.find(exp.Values):
            return False
        reads = {OCCURRENCE.format(o.id) for o in self.occurrences}
        if any(table.name not in reads or not isinstance(table.this, exp.Identifier) for table in tree.find_all(exp.Table)):
            return False
        return not any(
            _relation(select) and (select_from(select) is None or (_is_aggregated(select) and not select.args.get("group")))
            for select in tree.find_all(exp.Select)
        )

    def reached_by_change(self, table: str, changed: Sequence[str] | None) -> bool:
        """Whether a change of `table` that changed the columns `changed` (None: a row appeared or
        went) can change the view."""
        return changed is None or not self.reads_known or not self.reads(table).isdisjoint(changed)

    @cached_property
    def _columns_read(self) -> dict[str, frozenset[str]]:
        """Per table, the columns the body mentions; the body is parsed once per plan."""
        mentioned: dict[str, set[str]] = {}
        for column in sqlglot.parse_one(self.body, read="spark").find_all(exp.Column):
            mentioned.setdefault(column.table, set()).add(column.name)
        return {
            table: frozenset(name for o in self.occurrences if o.table == table for name in mentioned.get(o.alias, ()))
            for table in self.tables
        }

    def occurrence(self, occ_id: int) -> Occurrence:
        if occ_id < len(self.occurrences) and self.occurrences[occ_id].id == occ_id:
            return self.occurrences[occ_id]
        return next(o for o in self.occurrences if o.id == occ_id)  # a branch's tree keeps its ids (lakemv.core.planner.cost)

    def link_of(self, occ_id: int) -> Link | None:
        return next((link for link in self.links if link.child == occ_id), None)

    def chain(self, occ_id: int) -> tuple[Link, ...]:
        """The links from an occurrence up to the anchor."""
        links = []
        link = self.link_of(occ_id)
        while link is not None:
            links.append(link)
            link = self.link_of(link.parent)
        return tuple(links)


def _relation(select: exp.Select) -> bool:
    """Whether the rows of `select` are rows of a relation (the query, a branch of it, a FROM or JOIN
    item) rather than the value of a scalar subquery or an EXISTS/IN test."""
    node = select
    while isinstance(node.parent, (exp.Union, exp.Except, exp.Intersect, exp.Subquery, exp.Paren)):
        node = node.parent
    return node.parent is None or isinstance(node.parent, (exp.From, exp.Join))


def over(expression: str, alias: str) -> str:
    """Render a stored expression with its columns qualified by `alias`."""
    return re.sub(rf"\b{SELF}\.", f"{alias}.", expression)
