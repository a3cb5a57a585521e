"""What the store holds and how each view's lookups run: derived from the sources and the plans. Pure.

The planner's links say how a changed row reaches a view key (upwards, child to parent) and which
rows a key reads (downwards, parent to child). Each hop is a lookup of one table by the columns of
the link's equalities; the store keeps an index for every such column set. A hop whose equalities
compare expressions (`lower(a) = b`) keeps only its column-to-column pairs, which finds a superset of
the rows (the view's own SQL filters them again); a hop with none cannot be looked up, and its view
is maintained by scans (`Route.indexed` False, with the reason).

A view none of whose key columns is a plain column of its anchor (a key that is an expression,
`date_trunc('MONTH', registered_at)`, or a constant, `'all'`) finds its anchor rows by *derived*
columns of the anchor's part: each key expression's value per row, evaluated by Spark when the rows
enter the store (`MirrorPart.derived`), kept as an indexed SQLite column.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence

import sqlglot
from pydantic import BaseModel, ConfigDict
from sqlglot import exp
from sqlglot.errors import ParseError

from lakemv.catalog.declarations import SourceTable
from lakemv.core.planner import SELF, Link, ViewPlan
from lakemv.core.planner.aggregates import delta_plan

_PLAIN = re.compile(rf"^{SELF}\.(?:`([^`]+)`|([A-Za-z_][A-Za-z0-9_]*))$")
FORMAT = 2  # bump when the store's encoding changes: every store is rebuilt


def plain_column(expression: str) -> str | None:
    """The column name when a plan expression is a bare column of its occurrence, else None."""
    match = _PLAIN.match(expression.strip())
    return None if match is None else (match.group(1) or match.group(2))


NOT_CONSTANT = object()


def constant(expression: str) -> object:
    """The Python value of a plan expression that is a literal (a string, an integer, a boolean, NULL:
    the constants that tell a UNION ALL's branches apart), else `NOT_CONSTANT`. The caller checks the
    value against the view column's type (Spark may widen a literal to the other branches' type)."""
    try:
        node = sqlglot.parse_one(expression, read="spark")
    except ParseError:
        return NOT_CONSTANT
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this if "\\" not in expression else NOT_CONSTANT  # (Spark's escapes are its own)
        if re.fullmatch(r"[0-9]+", node.this):
            return int(node.this)
    return NOT_CONSTANT


class MirrorPart(BaseModel):
    """The store's copy of one mirror: every row by primary key, plus indexes by lookup columns."""

    model_config = ConfigDict(frozen=True)

    table: str
    primary_key: tuple[str, ...]
    columns: tuple[tuple[str, str], ...]  # (name, declared type), the mirror's order
    indexes: tuple[tuple[str, ...], ...]  # column sets looked up by, sorted; the primary key excluded
    located: bool = False  # also where each row lives in the table (data file, row), for position deletes
    retention: str = ""  # an event source: which of its events the views keep (another rule reloads them)
    # (name, Spark SQL over the row's columns qualified by SELF): a key expression's value per row,
    # evaluated by Spark as rows enter the store and looked up by; not part of the row itself
    derived: tuple[tuple[str, str], ...] = ()

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.columns)

    @property
    def derived_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.derived)

    @property
    def materialized(self) -> tuple[str, ...]:
        """Columns kept as SQLite columns (the key, every looked-up one, every derived one); the rest
        live in the row blob."""
        looked_up = {c for index in self.indexes for c in index}
        return tuple(c for c in self.column_names if c in self.primary_key or c in looked_up) + self.derived_names

    @property
    def fingerprint(self) -> str:
        """Changes when the rows must be reloaded (columns, key, a newly looked-up column); indexes
        over columns already kept are added and dropped in place."""
        text = f"{FORMAT}|{self.primary_key}|{self.columns}|{self.materialized}|{self.located}" + (f"|{self.retention}" if self.retention else "")
        return hashlib.sha1(text.encode()).hexdigest()[:16]


class ViewPart(BaseModel):
    """The store's copy of one view: a digest of each current row, by key."""

    model_config = ConfigDict(frozen=True)

    view: str
    key: tuple[str, ...]
    definition: str  # the definition's fingerprint: a new one means the digests are reloaded
    located: bool = False  # also where each row lives in the table (data file, row), for position deletes
    settle: str | None = None  # the column whose time says when a row is settled (its digest then goes)

    @property
    def fingerprint(self) -> str:
        text = f"{FORMAT}|{self.key}|{self.definition}|{self.located}" + (f"|settle:{self.settle}" if self.settle else "")
        return hashlib.sha1(text.encode()).hexdigest()[:16]


class Lookup(BaseModel):
    """One hop: the live rows of `table` whose `columns` equal the `using` columns of the rows before."""

    model_config = ConfigDict(frozen=True)

    table: str
    columns: tuple[str, ...]
    using: tuple[str, ...]  # columns of the rows the hop starts from, pairwise with `columns`
    null_safe: tuple[bool, ...]  # `<=>` pairs: NULL matches NULL
    exact: bool  # every equality of the link is used (else a superset is found)


class Route(BaseModel):
    """How the store serves one view: the hops up from each occurrence, and down from the keys."""

    model_config = ConfigDict(frozen=True)

    view: str
    indexed: bool
    reason: str | None = None  # why the view is maintained by scans instead
    up: Mapping[int, tuple[Lookup, ...]] = {}  # occurrence -> hops to the anchor (may be empty)
    key_columns: Mapping[int, tuple[str | None, ...]] = {}  # occurrence -> columns holding each key, after its hops
    anchors: Mapping[int, Lookup] = {}  # per anchor (a UNION ALL has one per branch): its rows for a set of keys (`using`: key names)
    down: Mapping[int, Lookup] = {}  # occurrence -> its rows, from its parent's rows
    derived: Mapping[str, str] = {}  # derived columns the anchor lookups use -> their expressions

    @property
    def exact_keys(self) -> bool:
        """Whether the anchor lookups find exactly the keys' rows (one anchor, every key a plain or derived column)."""
        return len(self.anchors) == 1 and all(a.exact for a in self.anchors.values())


def _hop(link: Link, plan: ViewPlan, upwards: bool) -> Lookup | None:
    """The lookup that crosses `link` (child to parent when `upwards`), or None if it has no plain pair."""
    pairs = []
    for child_expr, parent_expr, op in link.pairs:
        child, parent = plain_column(child_expr), plain_column(parent_expr)
        if child is not None and parent is not None:
            pairs.append((parent, child, op) if upwards else (child, parent, op))
    if not pairs:
        return None
    target = plan.occurrence(link.parent if upwards else link.child).table
    return Lookup(
        table=target,
        columns=tuple(p[0] for p in pairs),
        using=tuple(p[1] for p in pairs),
        null_safe=tuple(p[2] == "<=>" for p in pairs),
        exact=len(pairs) == len(link.pairs),
    )


def _refused(plan: ViewPlan, link: Link, what: str) -> Route:
    fragment = "; ".join(link.fragments) or "?"
    reason = f"{what} `{fragment}` compares expressions, not columns, so the store has no index to look it up by"
    return Route(view=plan.name, indexed=False, reason=reason)


def route(plan: ViewPlan) -> Route:
    """The lookups that maintain `plan` from the store, or a Route saying why it cannot. A UNION ALL
    has an anchor lookup per branch (its link tree's root), each by the plain columns of its branch's
    keys: a superset (the constant that tells the branches apart is not a column), which the
    recompute filters by the keys. A view that reads other views is maintained by scans: the store
    keeps sources' rows, not views'."""
    if plan.inputs:
        reason = f"it reads the view{'s' if len(plan.inputs) > 1 else ''} {', '.join(plan.upstream)}, whose rows the local state does not keep"
        return Route(view=plan.name, indexed=False, reason=reason)
    plain_keys = {b.anchor: tuple(plain_column(k.expr) for k in b.keys) for b in plan.anchors}
    up: dict[int, tuple[Lookup, ...]] = {}
    key_columns: dict[int, tuple[str | None, ...]] = {}
    for occ in plan.occurrences:
        chain = list(plan.chain(occ.id))
        anchor_keys = plain_keys[plan.anchor_of(occ.id)]
        carried: tuple[str | None, ...] | None = None
        if chain:  # the last hop is skipped when its link already carries every key column
            into_anchor = {plain_column(p): plain_column(c) for c, p, op in chain[-1].pairs if op == "="}
            if all(k is not None and into_anchor.get(k) for k in anchor_keys):
                carried = tuple(into_anchor[k] for k in anchor_keys)  # type: ignore[index]
                chain = chain[:-1]
        hops = []
        for link in chain:
            hop = _hop(link, plan, upwards=True)
            if hop is None:
                return _refused(plan, link, "the link")
            hops.append(hop)
        up[occ.id] = tuple(hops)
        key_columns[occ.id] = carried if carried is not None else anchor_keys
    derived: dict[str, str] = {}
    anchors: dict[int, Lookup] = {}
    for branch in plan.anchors:
        if all(k is None for k in plain_keys[branch.anchor]):  # every key an expression or a constant: looked up by their values
            derived.update({derived_name(k.expr): k.expr for k in branch.keys})
            plain = [(k.name, derived_name(k.expr)) for k in branch.keys]
        else:  # by the plain ones, a superset the recompute filters by the others
            plain = [(k.name, c) for k, c in zip(branch.keys, plain_keys[branch.anchor], strict=True) if c is not None]
        anchors[branch.anchor] = Lookup(
            table=plan.occurrence(branch.anchor).table,
            columns=tuple(c for _, c in plain),
            using=tuple(n for n, _ in plain),
            null_safe=tuple(True for _ in plain),  # a GROUP BY key may be NULL
            exact=len(plain) == len(branch.keys),
        )
    down: dict[int, Lookup] = {}
    for link in plan.links:
        hop = _hop(link, plan, upwards=False)
        if hop is None:
            return _refused(plan, link, "the link")
        down[link.child] = hop
    return Route(view=plan.name, indexed=True, up=up, key_columns=key_columns, anchors=anchors, down=down, derived=derived)


def grain_route(plan: ViewPlan) -> Route | None:
    """The lookups from a changed row of any table to the rows of the view's grain, and from those to their
    joined rows (`ViewPlan.at_grain`), when its aggregates follow deltas over them (`delta_plan`)."""
    if plan.grain is None:
        return None
    found = delta_plan(plan)
    return None if isinstance(found, str) or found.grain is None else route(plan.at_grain())


def derived_name(expression: str) -> str:
    """The store column of a key expression's value (views with the same expression share it)."""
    return "_lmv_x_" + hashlib.sha1(expression.encode()).hexdigest()[:12]


def _lookups(r: Route) -> Iterable[Lookup]:
    yield from (hop for hops in r.up.values() for hop in hops)
    yield from r.anchors.values()
    yield from r.down.values()


def mirror_parts(
    sources: Mapping[str, SourceTable], routes: Sequence[Route], located: bool = False, retention: Mapping[str, str] | None = None
) -> dict[str, MirrorPart]:
    """One part per source table (the store judges every batch's rows against the stored ones, so
    each mirror can be written without a MERGE), with an index per distinct lookup column set and
    per declared unique key; an event source's `retention` (what its views keep) is part of its
    fingerprint: a view that needs more of its events reloads them from the table;
    `located` parts also keep each row's place in the table's files."""
    indexes: dict[str, set[tuple[str, ...]]] = {table: set() for table in sources}
    derived: dict[str, dict[str, str]] = {table: {} for table in sources}
    for r in routes:
        if not r.indexed:
            continue
        for lookup in _lookups(r):
            indexes.setdefault(lookup.table, set()).add(tuple(sorted(lookup.columns)))
        for anchor in r.anchors.values():
            derived[anchor.table].update({c: r.derived[c] for c in anchor.columns if c in r.derived})
    for table, source in sources.items():  # ingest checks declared unique keys against the live rows (lakemv.core.cdc.unique)
        indexes[table] |= {tuple(sorted(u)) for u in source.unique}
        if source.is_events and source.event_time is not None:  # events are dropped by event time (retention)
            indexes[table].add((source.event_time,))
    parts = {}
    for table, sets in sorted(indexes.items()):
        source = sources[table]
        pk = tuple(sorted(source.primary_key))
        parts[table] = MirrorPart(
            table=table,
            primary_key=tuple(source.primary_key),
            columns=tuple((c.name, c.kind) for c in source.columns),
            indexes=tuple(sorted(s for s in sets if s != pk)),
            located=located,
            retention=(retention or {}).get(table, ""),
            derived=tuple(sorted(derived[table].items())),
        )
    return parts
