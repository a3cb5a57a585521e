"""The view key: its anchor occurrence, the proof that it is unique, and the tree of links to the anchor."""

from __future__ import annotations

from collections import deque

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from lakemv.core.errors import KeySpansTables, ViewDefinitionError
from lakemv.core.planner.model import SELF, Grain, KeyColumn, Link, holds_columns
from lakemv.core.planner.resolve import _Resolution
from lakemv.core.planner.sqltools import _conjuncts, _is_aggregated, _NotLocal, _SeveralTables, select_conjuncts, select_from

TRUE = "TRUE"  # both sides of the link to a view of one row: every row of the parent meets it


class _Keys(_Resolution):
    """Finds the anchor, proves the key unique, and links every occurrence to the anchor."""

    def _anchor(self, root: Scope) -> tuple[int, tuple[KeyColumn, ...]]:
        select = root.expression
        outputs = {p.alias_or_name: p for p in select.selects}
        for name in self.definition.key:
            if name not in outputs:
                raise self.fail(
                    f"key column {name!r} is not an output column (outputs: {', '.join(outputs)})"
                )
        if _is_aggregated(select) and not select.args.get("group"):
            return self._one_row_anchor(root, [outputs[name] for name in self.definition.key])
        keys = []
        anchors = set()
        for name in self.definition.key:
            projection = outputs[name]
            try:
                occ, expression = self._resolve_expression(projection.unalias(), root)
            except _NotLocal as exc:
                kind = KeySpansTables if isinstance(exc, _SeveralTables) else ViewDefinitionError
                raise self.fail(f"key column {name!r} must come from one table's row: {exc}", projection, kind) from None
            anchors.add(occ)
            keys.append(KeyColumn(name=name, expr=expression.sql(dialect="spark")))
        if len(anchors) != 1:
            tables = ", ".join(self.occurrences[o].alias for o in sorted(anchors))
            raise self.fail(f"the key columns come from several tables ({tables}); they must come from one", kind=KeySpansTables)
        return anchors.pop(), tuple(keys)

    def _one_row_anchor(self, root: Scope, projections: list[exp.Expression]) -> tuple[int, tuple[KeyColumn, ...]]:
        """An aggregate with no GROUP BY is one row (global totals): keyed by constants, anchored at the
        main query's FROM table. Every change to what it reads reaches its one key, which is recomputed
        over the whole table (explain shows the group's size)."""
        text = ", ".join(self.definition.key)
        for projection in projections:
            inner = projection.unalias()
            if inner.find(exp.Column, exp.Subquery, exp.Select, exp.AggFunc, exp.Window):
                raise self.fail(
                    f"an aggregate with no GROUP BY is one row, keyed by a constant: add e.g. `'all' AS scope` to "
                    f"its SELECT and declare `-- @key: scope` (key column {projection.alias_or_name!r} is "
                    f"`{inner.sql(dialect='spark')}`)",
                    projection,
                )
        from_ = select_from(root.expression)
        occ = self.occ_of.get(id(from_)) if isinstance(from_, exp.Table) else None
        if occ is None:
            raise self.fail(
                f"a view of one row ({text}) reads FROM a source table directly (its changes reach the one key); "
                "a CTE or subquery in FROM is not supported there"
            )
        return occ, tuple(KeyColumn(name=p.alias_or_name, expr=p.unalias().sql(dialect="spark")) for p in projections)

    def _check_unique(self, root: Scope, anchor: int, keys: tuple[KeyColumn, ...]) -> None:
        select = root.expression
        key_text = ", ".join(self.definition.key)
        outputs = {p.alias_or_name: p.unalias() for p in select.selects}
        if select.args.get("group"):
            groups = list(select.args["group"].expressions)
            key_exprs = [outputs[k] for k in self.definition.key]
            if any(not any(g == k for g in groups) for k in key_exprs):
                raise self.fail(
                    f"with GROUP BY the key ({key_text}) must be among the GROUP BY columns", select.args["group"]
                )
            beyond = [g for g in groups if not any(g == k for k in key_exprs)]
            determined = self._determined(root, anchor, keys) if beyond else set()
            for group in beyond:
                reason = self._undetermined(group, root, anchor, keys, determined)
                if reason:
                    table = self.occurrences[anchor].table
                    raise self.fail(
                        f"GROUP BY {group.sql(dialect='spark')} is not determined by the key ({key_text}): {reason}. "
                        f"Beyond the key, GROUP BY only columns of {table} when the key holds its primary key, columns of "
                        "tables joined by their key to what the key determines, or expressions over the key columns; "
                        "otherwise aggregate the column (e.g. max(...))",
                        group,
                    )
            return
        if _is_aggregated(select):
            return  # one row, keyed by constants (_one_row_anchor)
        anchor_occ = self.occurrences[anchor]
        if self.occ_scope[anchor] is not root:
            raise self.fail(
                f"the key comes from {anchor_occ.context}; select FROM the table {anchor_occ.table} directly "
                "so each of its rows is one view row"
            )
        source = self.sources[anchor_occ.table]
        if not self._holds_primary_key(anchor, keys):
            raise self.fail(
                f"the key ({key_text}) does not include the primary key of {anchor_occ.table} "
                f"({', '.join(source.primary_key)}); without GROUP BY each {anchor_occ.table} row is a view "
                "row, so the key must contain its primary key"
            )
        where_conjuncts = list(_conjuncts(select.args["where"].this)) if select.args.get("where") else []
        for join in select.args.get("joins") or []:
            if (join.args.get("kind") or "").upper() == "SEMI":
                continue  # a semi join filters; it never adds rows
            self._check_join_unique(join, root, list(_conjuncts(join.args.get("on"))) + where_conjuncts, key_text)

    def _check_join_unique(self, join: exp.Join, root: Scope, conjuncts: list[exp.Expression], key_text: str) -> None:
        """A main-query join must match at most one row: it equates the joined table's primary key or a
        declared unique key (with `=`: SQL UNIQUE lets NULLs repeat), or a derived table's GROUP BY."""
        alias = join.this.alias_or_name
        _node, joined = root.selected_sources[alias]
        equated: dict[str, bool] = {}  # column -> equated with `=` (not only `<=>`)
        for conjunct in conjuncts:
            if not isinstance(conjunct, (exp.EQ, exp.NullSafeEQ)):
                continue
            for mine, other in ((conjunct.left, conjunct.right), (conjunct.right, conjunct.left)):
                if (
                    isinstance(mine, exp.Column)
                    and mine.table == alias
                    and not any(c.table == alias for c in other.find_all(exp.Column))
                ):
                    equated[mine.name] = equated.get(mine.name, False) or isinstance(conjunct, exp.EQ)
        if self._keyed(joined, equated):
            return
        hint = ""
        if isinstance(joined, exp.Table):
            source = self.sources[joined.name]
            keys = [f"the primary key of {joined.name} ({', '.join(source.primary_key)})"]
            keys += [f"its unique key ({', '.join(u)}) with =" for u in source.unique]
            what = " or ".join(keys)
            if equated and not source.unique:
                columns = ", ".join(f'"{c}"' for c in sorted(equated))
                hint = (
                    f". If the source keeps ({', '.join(sorted(equated))}) unique, declare it in the source file "
                    f"of {joined.name}: unique = [[{columns}]]"
                )
        else:
            found = [", ".join(sorted(c)) for c, _ in self._unique_keys(joined)]
            grouped = isinstance(joined.expression, exp.Select) and joined.expression.args.get("group")
            kind = "GROUP BY" if grouped else "unique"
            what = f"its {kind} columns ({'; '.join(found)})" if found else "a GROUP BY on the join columns"
        raise self.fail(
            f"this join can match several rows per key ({key_text}): it must equate {what}. "
            "Aggregate the joined table in a CTE grouped by the join columns, or use a correlated subquery" + hint,
            join,
        )

    def _keyed(self, source: exp.Table | Scope, equated: dict[str, bool]) -> bool:
        """Whether the `equated` columns of `source` (column -> equated with `=`, not only `<=>`) cover
        one of its unique keys (`_unique_keys`): then at most one of its rows matches."""
        return any(
            columns <= set(equated) and (null_safe or all(equated[c] for c in columns)) for columns, null_safe in self._unique_keys(source)
        )

    def _unique_keys(self, source: exp.Table | Scope) -> list[tuple[frozenset[str], bool]]:
        """Column sets no two rows of `source` share: (columns, whether `<=>` may equate them too). A
        table's primary key (never NULL) and declared unique keys (`=` only); a derived table's GROUP BY
        outputs; and the unique keys of the one relation a derived table without joins selects from,
        through the columns it passes on unchanged."""
        if isinstance(source, exp.Table):
            declared = self.sources[source.name]
            return [(frozenset(declared.primary_key), True)] + [(frozenset(u), False) for u in declared.unique]
        select = source.expression
        if not isinstance(select, exp.Select):
            return []
        if select.args.get("group"):
            groups = select.args["group"].expressions
            names = frozenset(p.alias_or_name for p in select.selects if any(p.unalias() == g for g in groups))
            return [(names, True)] if len(names) >= len(groups) else []
        if select.args.get("joins") or len(source.selected_sources) != 1 or _is_aggregated(select):
            return []
        inner_alias, (_node, inner) = next(iter(source.selected_sources.items()))
        passed = {
            p.unalias().name: p.alias_or_name
            for p in select.selects
            if isinstance(p.unalias(), exp.Column) and p.unalias().table == inner_alias
        }
        return [
            (frozenset(passed[c] for c in columns), null_safe)
            for columns, null_safe in self._unique_keys(inner)
            if columns <= set(passed)
        ]

    def _holds_primary_key(self, anchor: int, keys: tuple[KeyColumn, ...]) -> bool:
        """Whether the key columns include every primary-key column of the anchor's table."""
        return holds_columns(keys, self.sources[self.occurrences[anchor].table].primary_key)

    def _undetermined(
        self, group: exp.Expression, root: Scope, anchor: int, keys: tuple[KeyColumn, ...], determined: set[int]
    ) -> str | None:
        """Why a GROUP BY expression beyond the key can take several values for one key (None: it cannot).
        `determined`: the tables of which the key reaches at most one row (`_determined`)."""
        resolved = self._try_resolve(group, root)
        if isinstance(resolved, str):
            return resolved
        occ, expression = resolved
        anchor_occ = self.occurrences[anchor]
        if occ != anchor:
            if occ in determined:
                return None  # at most one row of its table per key, joined by a key of it to what the key determines
            return (
                f"it comes from {self.occurrences[occ].table} {self.occurrences[occ].alias}, the key from {anchor_occ.table} "
                f"{anchor_occ.alias}, and the main query does not join {self.occurrences[occ].alias} by its primary key "
                "(or a unique key) to columns the key determines"
            )
        if {c.sql(dialect="spark") for c in expression.find_all(exp.Column)} <= {k.expr for k in keys}:
            return None  # an expression over the key columns
        if self._holds_primary_key(anchor, keys):
            return None  # one row of the anchor per key: its columns are the key's
        return (
            f"the key does not hold the primary key of {anchor_occ.table} "
            f"({', '.join(self.sources[anchor_occ.table].primary_key)}), so the rows of one key can differ in it"
        )

    def _determined(self, root: Scope, anchor: int, keys: tuple[KeyColumn, ...]) -> set[int]:
        """The main query's tables of which one key reaches at most one row, so the key determines each
        of their columns: the anchor when the key holds its primary key, and (repeatedly) a table the
        main query's ON or WHERE equates by its primary key, or a unique key with `=`, to columns of
        tables already determined or to the key's own columns (TPC-H Q3: `l_orderkey = o_orderkey`
        determines `o_orderdate` for the key `l_orderkey`)."""
        equalities = []  # (occurrence, its plain column, other occurrence, the other side's columns, `=` rather than `<=>`)
        for conjunct in select_conjuncts(root.expression):
            if not isinstance(conjunct, (exp.EQ, exp.NullSafeEQ)):
                continue
            left, right = self._try_resolve(conjunct.left, root), self._try_resolve(conjunct.right, root)
            if not isinstance(left, tuple) or not isinstance(right, tuple) or left[0] == right[0]:
                continue
            for (occ, mine), (other, theirs) in ((left, right), (right, left)):
                if isinstance(mine, exp.Column) and self.occ_scope.get(occ) is root:
                    equalities.append((occ, mine.name, other, {c.name for c in theirs.find_all(exp.Column)}, isinstance(conjunct, exp.EQ)))
        own = {k.expr.split(".", 1)[1] for k in keys if k.expr.startswith(f"{SELF}.") and "(" not in k.expr}
        whole = {anchor} if self._holds_primary_key(anchor, keys) else set()

        def known(occ: int, columns: set[str]) -> bool:
            return occ in whole or (occ == anchor and columns <= own)

        changed = True
        while changed:
            changed = False
            for occ in {e[0] for e in equalities} - whole:
                equated: dict[str, bool] = {}
                for mine, name, other, theirs, equal in equalities:
                    if mine == occ and known(other, theirs):
                        equated[name] = equated.get(name, False) or equal
                if self._keyed(exp.to_table(self.occurrences[occ].table), equated):
                    whole.add(occ)
                    changed = True
        return whole

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
        for occ in self.occurrences:  # a view of at most one row (a constant key) is read by every key
            if occ.id not in parent and getattr(self.sources[occ.table], "single_row", False):
                parent[occ.id] = anchor
                order.append(occ.id)
                self.edges.setdefault(tuple(sorted((occ.id, anchor))), []).append((TRUE, TRUE, "=", f"{occ.table}: one row, read by every key"))
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
        return tuple(self._link(child, parent[child]) for child in order)

    def _link(self, child: int, up: int) -> Link:
        """The link of `child` to `up` (its parent): their equalities, and whether they match a unique key of the child."""
        a, b = sorted((child, up))
        pairs, fragments = [], []
        for ea, eb, op, fragment in self.edges[(a, b)]:
            pairs.append((ea, eb, op) if a == child else (eb, ea, op))
            fragments.append(fragment)
        equated: dict[str, bool] = {}  # the child's plain columns the link equates -> with `=` (not only `<=>`)
        for mine, _theirs, op in pairs:
            if mine.startswith(f"{SELF}.") and mine.count(".") == 1 and "(" not in mine:
                column = mine.split(".", 1)[1].strip("`")
                equated[column] = equated.get(column, False) or op == "="
        unique = self._keyed(exp.to_table(self.occurrences[child].table), equated)
        return Link(child=child, parent=up, pairs=tuple(pairs), fragments=tuple(dict.fromkeys(fragments)), unique=unique)

    def _grain(self, links: tuple[Link, ...]) -> Grain | None:
        """When the key's tree fans out (a link matches several rows of its child): the first table of the
        main query each of whose rows is at most one joined row - a tree from it to every other table whose
        every link matches a unique key there (TPC-H Q5, keyed by nation: the line item, with its order,
        customer, supplier, nation and region) - with its primary key; else None. Aggregates by delta add
        up such a table's rows (`lakemv.core.planner.aggregates`)."""
        if all(link.unique for link in links):
            return None
        neighbours: dict[int, list[int]] = {}
        for a, b in self.edges:
            neighbours.setdefault(a, []).append(b)
            neighbours.setdefault(b, []).append(a)
        for start in (o.id for o in self.occurrences if o.context == "main query"):
            found, reached, queue = [], {start}, deque([start])
            while queue:
                current = queue.popleft()
                for nxt in sorted(neighbours.get(current, [])):
                    if nxt not in reached and (link := self._link(nxt, current)).unique:
                        reached.add(nxt)
                        found.append(link)
                        queue.append(nxt)
            if len(reached) == len(self.occurrences):
                key = tuple(KeyColumn(name=c, expr=exp.column(c, table=SELF).sql(dialect="spark")) for c in self.sources[self.occurrences[start].table].primary_key)
                return Grain(anchor=start, keys=key, links=tuple(found))
        return None
