"""Key-propagation planner: reads a view's SQL (sqlglot) and derives how changed rows reach view keys.

A view is maintainable when it is *key-local*: every output row is determined by the rows reachable
from its key through equality predicates. The planner checks that, table occurrence by occurrence:

* every source table the SQL reads (each occurrence: a table read twice is two occurrences) must be
  linked to the *anchor* - the occurrence the key columns come from - by equalities: JOIN ... ON
  a = b, correlated subqueries (WHERE inner.c = outer.c), `x IN (SELECT c ...)`, and CTEs or FROM
  subqueries joined on their GROUP BY columns;
* the links form a tree rooted at the anchor. Upwards, a changed row maps to view keys by joining
  its link columns through the live tables on the path; downwards, the rows a key needs are the
  anchor's rows for the key, then each child table semi-joined with its parent's filtered rows;
* the key must be unique by construction: the anchor's primary key (and every join in the main query
  matches at most one row), or exactly the GROUP BY columns of the main query.

Anything else - non-equality joins, uncorrelated reads, window functions, LIMIT, set operations,
non-deterministic functions - is refused with a ViewDefinitionError naming the fragment.
The plan is pure data; `spark.viewsql` turns it into SQL.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator, Mapping
from functools import cached_property

import sqlglot
from pydantic import BaseModel, ConfigDict
from sqlglot import exp
from sqlglot.errors import OptimizeError, SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, build_scope

from catalog.declarations import SourceTable
from catalog.errors import ViewDefinitionError
from spark.views import ViewDefinition

SELF = "_lmv_self"  # qualifier of the columns in a stored expression; replaced by an alias when rendered
OCCURRENCE = "_lmv_occ_{}"  # placeholder relation name of an occurrence in the plan's body
NONDETERMINISTIC = {
    "rand", "random", "randn", "uuid", "now", "current_timestamp", "current_date", "current_time",
    "localtimestamp", "shuffle", "monotonically_increasing_id", "spark_partition_id", "input_file_name",
    "unix_timestamp", "curdate", "current_timezone",
}  # fmt: skip


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


class KeyColumn(BaseModel):
    """A view key column and the expression over the anchor occurrence that computes it."""

    model_config = ConfigDict(frozen=True)

    name: str
    expr: str


class ViewPlan(BaseModel):
    """How a view is maintained: its anchor, the link tree over every occurrence, and its SQL body."""

    model_config = ConfigDict(frozen=True)

    definition: ViewDefinition
    anchor: int
    keys: tuple[KeyColumn, ...]
    occurrences: tuple[Occurrence, ...]
    links: tuple[Link, ...]  # one per occurrence except the anchor, parents before children
    columns: tuple[str, ...]  # output columns, in order
    body: str  # qualified Spark SQL, CTEs inlined, each source read as OCCURRENCE.format(id)

    @property
    def name(self) -> str:
        return self.definition.name

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
        return self.occurrences[occ_id]

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


def over(expression: str, alias: str) -> str:
    """Render a stored expression with its columns qualified by `alias`."""
    return re.sub(rf"\b{SELF}\.", f"{alias}.", expression)


class _NotLocal(Exception):
    """A column or expression that does not trace back to one occurrence's row."""


def _conjuncts(condition: exp.Expression | None) -> Iterator[exp.Expression]:
    if condition is None:
        return
    condition = condition.unnest()
    if isinstance(condition, exp.And):
        yield from _conjuncts(condition.left)
        yield from _conjuncts(condition.right)
    else:
        yield condition


def _short(node: exp.Expression, limit: int = 120) -> str:
    """A one-line rendering for messages; inlined CTEs are shown by their name again."""
    shown = node.copy()
    for subquery in list(shown.find_all(exp.Subquery)):
        cte = subquery.this.meta.get("lmv_cte") if subquery.this is not None else None
        if cte:
            alias = subquery.alias
            subquery.replace(exp.Table(this=exp.to_identifier(cte), alias=exp.TableAlias(this=exp.to_identifier(alias))) if alias and alias != cte else exp.Table(this=exp.to_identifier(cte)))
    text = " ".join(shown.sql(dialect="spark").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_aggregated(select: exp.Select) -> bool:
    """GROUP BY, or an aggregate function belonging to this SELECT (not to a nested subquery)."""
    if select.args.get("group"):
        return True
    return any(
        agg.find_ancestor(exp.Select) is select for projection in select.selects for agg in projection.find_all(exp.AggFunc)
    )


class _Planner:
    def __init__(self, definition: ViewDefinition, sources: Mapping[str, SourceTable]):
        self.definition = definition
        self.sources = sources
        self.occurrences: list[Occurrence] = []
        self.occ_of: dict[int, int] = {}  # id(exp.Table) -> occurrence id
        self.occ_scope: dict[int, Scope] = {}
        self.edges: dict[tuple[int, int], list[tuple[str, str, str]]] = {}
        self.problems: dict[int, list[str]] = {}
        self.scope_of_select: dict[int, Scope] = {}

    def fail(self, message: str, node: exp.Expression | str | None = None) -> ViewDefinitionError:
        fragment = node if isinstance(node, str) or node is None else _short(node)
        return ViewDefinitionError(self.definition.name, message, fragment)

    # ---- entry -------------------------------------------------------------------------------
    def plan(self) -> ViewPlan:
        if self.definition.name in self.sources:
            raise self.fail("a view cannot have the name of a source table (both are queried by plain name)")
        tree = sqlglot.parse_one(self.definition.sql, dialect="spark")
        self._refuse_constructs(tree)
        tree = self._inline_ctes(tree)
        self._check_tables(tree)
        schema = {name: {c.name: c.spark_type for c in src.columns} for name, src in self.sources.items()}
        try:
            tree = qualify(tree, schema=schema, dialect="spark", quote_identifiers=False)
        except OptimizeError as exc:
            raise self.fail(f"cannot resolve the SQL against the declared sources: {exc}") from None
        except SqlglotError as exc:
            raise self.fail(f"cannot analyse the SQL: {exc}") from None
        root = build_scope(tree)
        if root is None or not isinstance(root.expression, exp.Select):
            raise self.fail("the view must be a single SELECT (set operations are not supported)")
        scopes = list(root.traverse())
        for scope in scopes:
            self._check_scope(scope, root)
            self.scope_of_select[id(scope.expression)] = scope
        for scope in scopes:
            self._collect_occurrences(scope)
        for scope in scopes:
            self._collect_edges(scope)
        anchor, keys = self._anchor(root)
        self._check_unique(root, anchor, keys)
        links = self._spanning_tree(anchor)
        columns = self._output_columns(root)
        for table in tree.find_all(exp.Table):
            occ = self.occ_of.get(id(table))
            if occ is not None:
                table.set("this", exp.to_identifier(OCCURRENCE.format(occ)))
                table.set("db", None)
                table.set("catalog", None)
        return ViewPlan(
            definition=self.definition,
            anchor=anchor,
            keys=keys,
            occurrences=tuple(self.occurrences),
            links=links,
            columns=columns,
            body=tree.sql(dialect="spark"),
        )

    # ---- syntax-level refusals ---------------------------------------------------------------------
    def _refuse_constructs(self, tree: exp.Expression) -> None:
        for node in tree.walk():
            if isinstance(node, exp.Window):
                raise self.fail(
                    "window functions compare a row with other rows of the table, so a change can move "
                    "any key; use a GROUP BY or a correlated subquery instead",
                    node,
                )
            if isinstance(node, exp.Func):
                name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
                if name in NONDETERMINISTIC:
                    raise self.fail(
                        f"{name}() is not deterministic: recomputing a key would not reproduce its row", node
                    )
            if isinstance(node, (exp.Union, exp.Intersect, exp.Except)):
                raise self.fail("set operations (UNION / INTERSECT / EXCEPT) are not supported in views", node)
            if isinstance(node, exp.With) and node.args.get("recursive"):
                raise self.fail("recursive CTEs are not supported", node)

    def _inline_ctes(self, tree: exp.Expression) -> exp.Expression:
        """Replace every CTE reference by a copy of its body, so each read has its own table occurrences."""
        while True:
            with_ = next(iter(tree.find_all(exp.With, bfs=True)), None)
            if with_ is None:
                return tree
            query = with_.parent
            ctes = list(with_.expressions)
            query.set(with_.arg_key, None)
            for index, cte in enumerate(ctes):
                name = cte.alias
                targets = [c.this for c in ctes[index + 1 :]] + [query]
                for target in targets:
                    for table in list(target.find_all(exp.Table)):
                        if table.args.get("db") or table.name.lower() != name.lower():
                            continue
                        alias = cte.args["alias"].copy()
                        alias.set("this", exp.to_identifier(table.alias or name))
                        body = cte.this.copy()
                        body.meta["lmv_cte"] = name
                        table.replace(exp.Subquery(this=body, alias=alias))

    def _check_tables(self, tree: exp.Expression) -> None:
        for table in tree.find_all(exp.Table):
            if table.args.get("db"):
                raise self.fail(
                    "read source tables by plain name (users, repos, ...); catalogs and namespaces are "
                    "lakemv's business",
                    table,
                )
            if table.name not in self.sources:
                raise self.fail(
                    f"reads {table.name!r}, which is not a declared source "
                    f"(declared: {', '.join(sorted(self.sources))})",
                    table,
                )

    def _check_scope(self, scope: Scope, root: Scope) -> None:
        select = scope.expression
        if not isinstance(select, exp.Select):
            raise self.fail("set operations (UNION / INTERSECT / EXCEPT) are not supported in views", select)
        for join in select.args.get("joins") or []:
            side = (join.args.get("side") or "").upper()
            kind = (join.args.get("kind") or "").upper()
            if side in ("RIGHT", "FULL"):
                raise self.fail(
                    f"{side} OUTER JOIN can produce rows that no key reaches; write it as a LEFT JOIN from "
                    "the table the key comes from",
                    join,
                )
            if kind in ("ANTI",):
                raise self.fail("ANTI JOIN is not supported; use NOT EXISTS with an equality", join)
        limited = select.args.get("limit") or select.args.get("offset")
        if limited is not None and (scope is root or scope.is_derived_table):
            raise self.fail(
                "LIMIT/OFFSET over a whole relation makes a row depend on every other row; limit inside a "
                "correlated subquery instead",
                limited,
            )
        if scope is root and select.args.get("distinct"):
            raise self.fail("SELECT DISTINCT: group by the key columns instead", select.args["distinct"])

    # ---- occurrences and edges ---------------------------------------------------------------------
    def _context(self, scope: Scope) -> str:
        if scope.parent is None:
            return "main query"
        if scope.is_derived_table:
            subquery = scope.expression.parent
            cte = scope.expression.meta.get("lmv_cte")
            alias = subquery.alias if isinstance(subquery, exp.Subquery) else ""
            if cte:
                return f"CTE {cte}" + (f" (as {alias})" if alias and alias != cte else "")
            return f"FROM subquery {alias}".strip()
        outer = scope.parent.expression
        node = scope.expression
        while node.parent is not None and node.parent is not outer:
            node = node.parent
        if isinstance(node, exp.Alias) and node.parent is outer:
            return f"subquery for column {node.alias}"
        return f"subquery in {node.arg_key.upper() if node.arg_key else 'the query'} `{_short(scope.expression, 60)}`"

    def _collect_occurrences(self, scope: Scope) -> None:
        for alias, (_node, source) in scope.selected_sources.items():
            if isinstance(source, exp.Table):
                occ = len(self.occurrences)
                self.occurrences.append(Occurrence(id=occ, table=source.name, alias=alias, context=self._context(scope)))
                self.occ_of[id(source)] = occ
                self.occ_scope[occ] = scope

    def _resolve_column(self, column: exp.Column, scope: Scope) -> tuple[int, exp.Expression]:
        table = column.table
        current: Scope | None = scope
        while current is not None and table not in current.selected_sources:
            current = current.parent
        if current is None:
            raise _NotLocal(f"column {column.sql(dialect='spark')} does not belong to any table")
        _node, source = current.selected_sources[table]
        if isinstance(source, exp.Table):
            return self.occ_of[id(source)], exp.column(column.name, table=SELF)
        return self._resolve_output(source, column.name, table)

    def _resolve_output(self, scope: Scope, name: str, alias: str) -> tuple[int, exp.Expression]:
        select = scope.expression
        projection = next((p for p in select.selects if p.alias_or_name == name), None)
        if projection is None:
            raise _NotLocal(f"{alias}.{name} is not an output of {alias}")
        inner = projection.unalias()
        if _is_aggregated(select):
            groups = list((select.args.get("group") or exp.Group()).expressions)
            if not any(inner == g for g in groups):
                raise _NotLocal(
                    f"{alias}.{name} is computed by an aggregate of {alias}, not one of its GROUP BY columns"
                )
        return self._resolve_expression(inner, scope)

    def _resolve_expression(self, expression: exp.Expression, scope: Scope) -> tuple[int, exp.Expression]:
        if expression.find(exp.Subquery, exp.Select, exp.AggFunc):
            raise _NotLocal(f"`{_short(expression, 60)}` is not a plain expression over one row")
        columns = list(expression.find_all(exp.Column))
        if not columns:
            raise _NotLocal(f"`{_short(expression, 60)}` is a constant")
        resolved = [self._resolve_column(c, scope) for c in columns]
        occs = {occ for occ, _ in resolved}
        if len(occs) != 1:
            raise _NotLocal(f"`{_short(expression, 60)}` combines columns of several tables")
        copy = expression.copy()
        for column, (_occ, replacement) in zip(list(copy.find_all(exp.Column)), resolved, strict=True):
            if column is copy:
                copy = replacement.copy()
            else:
                column.replace(replacement.copy())
        return occs.pop(), copy

    def _try_resolve(self, expression: exp.Expression, scope: Scope) -> tuple[int, exp.Expression] | str:
        try:
            return self._resolve_expression(expression, scope)
        except _NotLocal as exc:
            return str(exc)

    def _occurrences_in(self, expression: exp.Expression, scope: Scope) -> set[int]:
        """Occurrences an expression's columns come from; a column of a FROM subquery that does not
        resolve (an aggregate, say) stands for every occurrence inside that subquery."""
        found = set()
        for column in expression.find_all(exp.Column):
            try:
                found.add(self._resolve_column(column, scope)[0])
            except _NotLocal:
                current: Scope | None = scope
                while current is not None and column.table not in current.selected_sources:
                    current = current.parent
                if current is None:
                    continue
                source = current.selected_sources[column.table][1]
                if isinstance(source, Scope):
                    inner = {id(s) for s in source.traverse()}
                    found |= {occ for occ, s in self.occ_scope.items() if id(s) in inner}
        return found

    def _add_edge(
        self, left: tuple[int, exp.Expression], right: tuple[int, exp.Expression], op: str, fragment: str
    ) -> None:
        (a, ea), (b, eb) = left, right
        if a > b:
            (a, ea), (b, eb) = (b, eb), (a, ea)
        self.edges.setdefault((a, b), []).append((ea.sql(dialect="spark"), eb.sql(dialect="spark"), op, fragment))

    def _collect_edges(self, scope: Scope) -> None:
        select = scope.expression
        conditions = [select.args.get("where")]
        conditions += [join.args.get("on") for join in select.args.get("joins") or []]
        for condition in conditions:
            if condition is None:
                continue
            where = condition.this if isinstance(condition, exp.Where) else condition
            for conjunct in _conjuncts(where):
                self._conjunct(conjunct, scope)

    def _conjunct(self, conjunct: exp.Expression, scope: Scope) -> None:
        fragment = _short(conjunct)
        if isinstance(conjunct, (exp.EQ, exp.NullSafeEQ)):
            left = self._try_resolve(conjunct.left, scope)
            right = self._try_resolve(conjunct.right, scope)
            if isinstance(left, tuple) and isinstance(right, tuple):
                if left[0] != right[0]:
                    self._add_edge(left, right, "<=>" if isinstance(conjunct, exp.NullSafeEQ) else "=", fragment)
                return
            involved = self._occurrences_in(conjunct, scope)
            reason = left if isinstance(left, str) else right
            if len(involved) > 1:
                for occ in involved:
                    self.problems.setdefault(occ, []).append(f"`{fragment}` cannot be followed: {reason}")
            return
        if isinstance(conjunct, exp.In) and conjunct.args.get("query") is not None:
            subquery = conjunct.args["query"]
            inner_select = subquery.this if isinstance(subquery, exp.Subquery) else subquery
            inner_scope = self.scope_of_select.get(id(inner_select))
            left = self._try_resolve(conjunct.this, scope)
            if inner_scope is not None and isinstance(inner_select, exp.Select) and len(inner_select.selects) == 1:
                right = self._try_resolve(inner_select.selects[0].unalias(), inner_scope)
                if isinstance(left, tuple) and isinstance(right, tuple) and left[0] != right[0]:
                    self._add_edge(left, right, "=", fragment)
                    return
        involved = self._occurrences_in(conjunct, scope)
        if len(involved) > 1:
            for occ in involved:
                self.problems.setdefault(occ, []).append(
                    f"`{fragment}` relates tables without an equality, which keys cannot be traced through"
                )

    def _output_columns(self, root: Scope) -> tuple[str, ...]:
        original = sqlglot.parse_one(self.definition.sql, dialect="spark")
        for projection in original.selects:
            if projection.find(exp.Star) is not None and not projection.find(exp.Count):
                raise self.fail("list the view's columns instead of *, so its schema does not change under you", projection)
        names = []
        for index, projection in enumerate(root.expression.selects):
            name = projection.alias_or_name
            source = original.selects[index]
            if not isinstance(source, (exp.Alias, exp.Column)):
                raise self.fail(f"output column {index + 1} needs a name: add `AS <name>`", source)
            if not re.match(r"^[a-z][a-z0-9_]*$", name):
                raise self.fail(f"output column {name!r} must be a lower-case identifier", projection)
            if name in names:
                raise self.fail(f"output column {name!r} appears twice", projection)
            names.append(name)
        return tuple(names)

    # ---- key, uniqueness, tree -------------------------------------------------------------------
    def _anchor(self, root: Scope) -> tuple[int, tuple[KeyColumn, ...]]:
        select = root.expression
        outputs = {p.alias_or_name: p for p in select.selects}
        keys = []
        anchors = set()
        for name in self.definition.key:
            projection = outputs.get(name)
            if projection is None:
                raise self.fail(
                    f"key column {name!r} is not an output column (outputs: {', '.join(outputs)})"
                )
            try:
                occ, expression = self._resolve_expression(projection.unalias(), root)
            except _NotLocal as exc:
                raise self.fail(f"key column {name!r} must come from one table's row: {exc}", projection) from None
            anchors.add(occ)
            keys.append(KeyColumn(name=name, expr=expression.sql(dialect="spark")))
        if len(anchors) != 1:
            tables = ", ".join(self.occurrences[o].alias for o in sorted(anchors))
            raise self.fail(f"the key columns come from several tables ({tables}); they must come from one")
        return anchors.pop(), tuple(keys)

    def _check_unique(self, root: Scope, anchor: int, keys: tuple[KeyColumn, ...]) -> None:
        select = root.expression
        key_text = ", ".join(self.definition.key)
        outputs = {p.alias_or_name: p.unalias() for p in select.selects}
        if select.args.get("group"):
            groups = list(select.args["group"].expressions)
            key_exprs = [outputs[k] for k in self.definition.key]
            missing = [g for g in groups if not any(g == k for k in key_exprs)]
            extra = [k for k in key_exprs if not any(g == k for g in groups)]
            if missing or extra:
                raise self.fail(
                    f"with GROUP BY the key ({key_text}) must be exactly the GROUP BY columns", select.args["group"]
                )
            return
        if _is_aggregated(select):
            raise self.fail("an aggregate over the whole main query has no key; GROUP BY the key columns")
        anchor_occ = self.occurrences[anchor]
        if self.occ_scope[anchor] is not root:
            raise self.fail(
                f"the key comes from {anchor_occ.context}; select FROM the table {anchor_occ.table} directly "
                "so each of its rows is one view row"
            )
        source = self.sources[anchor_occ.table]
        own = {k.expr for k in keys}
        missing_pk = [c for c in source.primary_key if exp.column(c, table=SELF).sql(dialect="spark") not in own]
        if missing_pk:
            raise self.fail(
                f"the key ({key_text}) does not include the primary key of {anchor_occ.table} "
                f"({', '.join(source.primary_key)}); without GROUP BY each {anchor_occ.table} row is a view "
                "row, so the key must contain its primary key"
            )
        where_conjuncts = list(_conjuncts(select.args["where"].this)) if select.args.get("where") else []
        for join in select.args.get("joins") or []:
            if (join.args.get("kind") or "").upper() == "SEMI":
                continue  # a semi join filters; it never adds rows
            alias = join.this.alias_or_name
            _node, joined = root.selected_sources[alias]
            conjuncts = list(_conjuncts(join.args.get("on"))) + where_conjuncts
            equated = set()
            for conjunct in conjuncts:
                if not isinstance(conjunct, (exp.EQ, exp.NullSafeEQ)):
                    continue
                for mine, other in ((conjunct.left, conjunct.right), (conjunct.right, conjunct.left)):
                    if (
                        isinstance(mine, exp.Column)
                        and mine.table == alias
                        and not any(c.table == alias for c in other.find_all(exp.Column))
                    ):
                        equated.add(mine.name)
            if isinstance(joined, exp.Table):
                unique = set(self.sources[joined.name].primary_key)
                what = f"the primary key of {joined.name} ({', '.join(sorted(unique))})"
            elif isinstance(joined.expression, exp.Select) and joined.expression.args.get("group"):
                groups = joined.expression.args["group"].expressions
                names = {p.alias_or_name for p in joined.expression.selects if any(p.unalias() == g for g in groups)}
                unique = names if len(names) >= len(groups) else {"<a GROUP BY column not in the output>"}
                what = f"its GROUP BY columns ({', '.join(sorted(unique))})"
            else:
                unique = {"<none>"}
                what = "a GROUP BY on the join columns"
            if not unique <= equated:
                raise self.fail(
                    f"this join can match several rows per key ({key_text}): it must equate {what}. "
                    "Aggregate the joined table in a CTE grouped by the join columns, or use a correlated "
                    "subquery",
                    join,
                )

    def _spanning_tree(self, anchor: int) -> tuple[Link, ...]:
        neighbours: dict[int, list[int]] = {}
        for a, b in self.edges:
            neighbours.setdefault(a, []).append(b)
            neighbours.setdefault(b, []).append(a)
        parent: dict[int, int] = {anchor: anchor}
        order = []
        queue = deque([anchor])
        while queue:
            current = queue.popleft()
            for nxt in sorted(neighbours.get(current, [])):
                if nxt not in parent:
                    parent[nxt] = current
                    order.append(nxt)
                    queue.append(nxt)
        for occ in self.occurrences:
            if occ.id not in parent:
                problems = self.problems.get(occ.id)
                reason = (
                    problems[0]
                    if problems
                    else "nothing relates it to the key by an equality (an uncorrelated subquery, a cross "
                    "join, or a join without an ON equality)"
                )
                raise self.fail(
                    f"{occ.table} {occ.alias} ({occ.context}) is not linked to the view key "
                    f"({', '.join(self.definition.key)}): {reason}. Every table must be reachable from the "
                    "key through equalities, otherwise any change to it could affect every row"
                )
        links = []
        for child in order:
            up = parent[child]
            a, b = sorted((child, up))
            pairs, fragments = [], []
            for ea, eb, op, fragment in self.edges[(a, b)]:
                pairs.append((ea, eb, op) if a == child else (eb, ea, op))
                fragments.append(fragment)
            links.append(Link(child=child, parent=up, pairs=tuple(pairs), fragments=tuple(dict.fromkeys(fragments))))
        return tuple(links)


def plan_view(definition: ViewDefinition, sources: Mapping[str, SourceTable]) -> ViewPlan:
    """Plan a view; raises ViewDefinitionError when it is outside the incrementally maintainable class."""
    return _Planner(definition, sources).plan()
