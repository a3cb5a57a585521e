"""SQL of the incremental step, generated from a ViewPlan. Pure: tests check the text, Spark runs it.

* `affected_keys_sql`: changed rows (old and new images, one temp view per table) -> view keys, by
  joining each changed row's link columns up its chain of live tables to the anchor.
* `recompute_sql`: the view restricted to a set of keys. Each table occurrence is replaced by a CTE:
  the anchor semi-joined with the keys, every other occurrence semi-joined with its parent's CTE on
  the link equalities. With no keys (a backfill) each CTE is just the live table.
* `diff_sql`: recomputed rows full-outer-joined with the view table's rows for the same keys; keeps
  only rows whose content changed (`upsert`) and keys that no longer produce a row (`delete`).
* `merge_sql`: apply a materialised diff to the view table (its change feed: lakemv.core.sql.feedsql).

Every statement is a sqlglot tree rendered in Spark's dialect. The pieces it is built from are SQL
text made elsewhere - the planner's expressions over `_lmv_self` and its view body, the live rows of a
mirror - and are parsed once (cached by text) and copied into each tree. Relations given by name (a
table or a temp view) are plain table references; given as a query, they become a subquery.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlglot import exp

from lakemv.core.planner import OCCURRENCE, KeyColumn, ViewPlan, over
from lakemv.core.planner.finality import final_rows
from lakemv.core.planner.sqltools import spark_tree as _tree

Watermarks = Mapping[str, "int | None"]

DIALECT = "spark"
DIFF_OP = "_lmv_diff"  # a diff row's action: upsert, delete or held (the mirrors' _lmv_op is a Debezium op)
NEW_MARK = "_lmv_n"
OLD_MARK = "_lmv_o"
ROWS_MARK = "_lmv_rows"  # how many recomputed rows share the key (more than one: held)
_NEW, _OLD = "_lmv_new", "_lmv_old"


def _name(name: str) -> exp.Identifier:
    """A name lakemv did not choose (a view's column): always quoted."""
    return exp.to_identifier(name, quoted=True)


def _col(alias: str, name: str) -> exp.Column:
    return exp.Column(this=_name(name), table=exp.to_identifier(alias))


def _mark(alias: str, name: str) -> exp.Column:
    """A column lakemv named itself (plain identifiers)."""
    return exp.column(name, table=alias)


def _over(expression: str, alias: str) -> exp.Expression:
    """A planner expression with its columns read from `alias` (`lakemv.core.planner.over`), as a tree."""
    return _tree(over(expression, alias))


def relation(sql: str, alias: str) -> exp.Expression:
    """`sql` as a FROM item called `alias`: a subquery when it is a query, else a table or temp view's name."""
    tree = _tree(sql)
    if isinstance(tree, exp.Query):
        return tree.subquery(alias)
    table = exp.to_table(sql, dialect=DIALECT)
    table.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    return table


def _pair(op: str, left: exp.Expression, right: exp.Expression) -> exp.Expression:
    return exp.NullSafeEQ(this=left, expression=right) if op == "<=>" else exp.EQ(this=left, expression=right)


def _on(pairs: Sequence[tuple[str, str, str]], child: str, parent: str) -> exp.Expression:
    return exp.and_(*(_pair(op, _over(c, child), _over(p, parent)) for c, p, op in pairs))


def _key_match(key_columns: Sequence[KeyColumn], keys: str, alias: str) -> exp.Expression:
    return exp.and_(*(exp.NullSafeEQ(this=_col(keys, k.name), expression=_over(k.expr, alias)) for k in key_columns))  # a NULL group is a key


def _same(left: str, right: str, names: Sequence[str]) -> exp.Expression:
    """`left.c <=> right.c` for each column of `names`."""
    return exp.and_(*(exp.NullSafeEQ(this=_col(left, n), expression=_col(right, n)) for n in names))


def _semi(select: exp.Select, other: exp.Expression, on: exp.Expression) -> exp.Select:
    return select.join(other, on=on, join_type="left semi", copy=False)


def _cte_trees(plan: ViewPlan, live: Mapping[str, str], keys: str | None) -> list[tuple[str, exp.Query]]:
    if keys is None:
        order = [*(b.anchor for b in plan.anchors), *(link.child for link in plan.links)]
        return [(OCCURRENCE.format(o), _as_query(live[plan.occurrence(o).table])) for o in order]
    ctes: list[tuple[str, exp.Query]] = []
    for branch in plan.anchors:  # a UNION ALL branch reads nothing for another branch's keys
        anchor = plan.occurrence(branch.anchor)
        select = exp.select("a.*").from_(relation(live[anchor.table], "a"))
        ctes.append((OCCURRENCE.format(anchor.id), _semi(select, relation(keys, "k"), _key_match(branch.keys, "k", "a"))))
    for link in plan.links:
        select = exp.select("c.*").from_(relation(live[plan.occurrence(link.child).table], "c"))
        parent = relation(OCCURRENCE.format(link.parent), "p")
        ctes.append((OCCURRENCE.format(link.child), _semi(select, parent, _on(link.pairs, "c", "p"))))
    return ctes


def _as_query(sql: str) -> exp.Query:
    tree = _tree(sql)
    return tree if isinstance(tree, exp.Query) else exp.select("*").from_(exp.to_table(sql, dialect=DIALECT))


def filtered_ctes(plan: ViewPlan, live: Mapping[str, str], keys: str | None) -> list[tuple[str, str]]:
    """(name, SQL) of the relation that stands for each occurrence, parents before children."""
    return [(name, tree.sql(dialect=DIALECT)) for name, tree in _cte_trees(plan, live, keys)]


def _with(ctes: Sequence[tuple[str, exp.Query]], body: exp.Query) -> exp.Query:
    for name, tree in ctes:
        body = body.with_(name, as_=tree, copy=False)
    return body


def _body(plan: ViewPlan, watermarks: Watermarks | None) -> exp.Query:
    return final_rows(_tree(plan.body), plan.finality, watermarks or {})  # type: ignore[arg-type]


def rows_sql(plan: ViewPlan, watermarks: Watermarks | None = None) -> str:
    """The view's planned body, with `window_final` judged by `watermarks` when it has a window."""
    return _body(plan, watermarks).sql(dialect=DIALECT)


def recompute_sql(plan: ViewPlan, live: Mapping[str, str], keys: str | None = None, watermarks: Watermarks | None = None) -> str:
    """The view's rows for the keys in relation `keys` (all rows when None)."""
    return _with(_cte_trees(plan, live, keys), _body(plan, watermarks)).sql(dialect=DIALECT)


def _chain(plan: ViewPlan, occ_id: int, delta: str, live: Mapping[str, str]) -> exp.Select:
    chain = list(plan.chain(occ_id))
    key_exprs = [k.expr for k in plan.keys_at(plan.anchor_of(occ_id))]
    # The last hop into the anchor can be skipped when the link already carries the key columns; its
    # `=` would not have matched a NULL, so neither does the skipped hop. Otherwise a NULL key is a key
    # (a GROUP BY's NULL group is a row of the view).
    where: list[exp.Expression] = []
    if chain:
        carried = {parent: child for child, parent, op in chain[-1].pairs if op == "="}
        if all(e in carried for e in key_exprs):
            key_exprs = [carried[e] for e in key_exprs]
            chain = chain[:-1]
            where = [exp.Not(this=exp.Is(this=_over(e, f"x{len(chain)}"), expression=exp.Null())) for e in key_exprs]
    alias = f"x{len(chain)}"
    select = exp.select(*(exp.alias_(_over(e, alias), _name(k.name)) for e, k in zip(key_exprs, plan.keys, strict=True)))
    select = select.from_(relation(delta, "x0"), copy=False)
    for index, link in enumerate(chain):
        parent = relation(live[plan.occurrence(link.parent).table], f"x{index + 1}")
        select = select.join(parent, on=_on(link.pairs, f"x{index}", f"x{index + 1}"), copy=False)
    if where:
        select = select.where(exp.and_(*where), copy=False)
    return select


def chain_sql(plan: ViewPlan, occ_id: int, delta: str, live: Mapping[str, str]) -> str:
    """Keys reached from the rows of `delta` read as occurrence `occ_id`."""
    return _chain(plan, occ_id, delta, live).sql(dialect=DIALECT)


def affected_key_queries(plan: ViewPlan, live: Mapping[str, str], deltas: Mapping[str, str]) -> list[str]:
    """One query per occurrence of a changed table: the view keys its changed rows reach (repeats possible)."""
    return [chain_sql(plan, o.id, deltas[o.table], live) for o in plan.occurrences if o.table in deltas]


def _old_rows(plan: ViewPlan, view_table: str, keys: str) -> exp.Select:
    select = exp.select("v.*").from_(relation(view_table, "v"))
    return _semi(select, relation(keys, "k"), _same("k", "v", plan.key_names))


def old_rows_sql(plan: ViewPlan, view_table: str, keys: str) -> str:
    """The view table's rows for the keys in relation `keys`."""
    return _old_rows(plan, view_table, keys).sql(dialect=DIALECT)


def affected_keys_sql(plan: ViewPlan, live: Mapping[str, str], deltas: Mapping[str, str]) -> str | None:
    """Distinct view keys reached from the changed rows in `deltas` (table -> relation), or None."""
    parts = [_chain(plan, o.id, deltas[o.table], live) for o in plan.occurrences if o.table in deltas]
    if not parts:
        return None
    if len(parts) == 1:  # UNION is what makes several parts distinct
        names = [_name(k.name) for k in plan.keys]
        return exp.select(*names).distinct().from_(parts[0].subquery("_lmv_keys")).sql(dialect=DIALECT)
    return exp.union(*parts, distinct=True).sql(dialect=DIALECT)


def diff_sql(plan: ViewPlan, live: Mapping[str, str], view_table: str, keys: str | None, watermarks: Watermarks | None = None) -> str:
    """Rows to upsert (content differs or new) and keys to delete, for `keys` (all when None)."""
    key_names = plan.key_names
    rows = exp.Window(this=exp.Count(this=exp.Star()), partition_by=[exp.column(_name(k)) for k in key_names])
    new = exp.select("*", exp.alias_(exp.true(), NEW_MARK), exp.alias_(rows, ROWS_MARK)).from_(_body(plan, watermarks).subquery("_lmv_body"))
    old = exp.select("v.*").from_(relation(view_table, "v")) if keys is None else _old_rows(plan, view_table, keys)
    ctes = [*_cte_trees(plan, live, keys), (_NEW, new), (_OLD, exp.select("o.*", exp.alias_(exp.true(), OLD_MARK)).from_(old.subquery("o")))]
    values = [c for c in plan.columns if c not in key_names]
    select: list[exp.Expression] = [exp.alias_(exp.func("coalesce", _col("n", k), _col("o", k)), _name(k)) for k in key_names]
    select += [exp.alias_(_col("n", c), _name(c)) for c in values]
    new_missing = exp.Is(this=_mark("n", NEW_MARK), expression=exp.Null())
    several = exp.GT(this=_mark("n", ROWS_MARK), expression=exp.Literal.number(1))
    # a key with several new rows (a declared unique key violated: lakemv.core.cdc.unique) is 'held': left alone
    action = exp.Case().when(new_missing, exp.Literal.string("delete")).when(several.copy(), exp.Literal.string("held"))
    select.append(exp.alias_(action.else_(exp.Literal.string("upsert")), DIFF_OP))
    changed: list[exp.Expression] = [new_missing.copy(), exp.Is(this=_mark("o", OLD_MARK), expression=exp.Null()), several.copy()]
    if values:
        changed.append(exp.Not(this=exp.paren(_same("n", "o", values))))
    query = (
        exp.select(*select)
        .from_(relation(_NEW, "n"))
        .join(relation(_OLD, "o"), on=_same("n", "o", key_names), join_type="full outer")
        .where(exp.or_(*changed))
    )
    return _with(ctes, query).sql(dialect=DIALECT)


def merge_sql(plan: ViewPlan, view_table: str, diff: str, prefilter: str | None = None) -> str:
    """MERGE a materialised diff into the view table: delete, update changed content, insert new keys.

    `prefilter`: a predicate on the view's key columns true for every key of the diff, as
    `lakemv.core.sql.quote.key_filter` renders it; kept as that text (up to 20,000 literals are not
    parsed again).
    """
    on = _same("t", "s", plan.key_names)
    if prefilter:
        on = exp.and_(on, exp.Var(this=f"({prefilter})"))
    values = [c for c in plan.columns if c not in plan.key_names]
    op = _mark("s", DIFF_OP)
    whens = [exp.When(matched=True, condition=exp.EQ(this=op, expression=exp.Literal.string("delete")), then=exp.var("DELETE"))]
    if values:
        updates = [exp.EQ(this=_col("t", c), expression=_col("s", c)) for c in values]
        whens.append(exp.When(matched=True, then=exp.Update(expressions=updates)))
    insert = exp.Insert(
        this=exp.Tuple(expressions=[exp.column(_name(c)) for c in plan.columns]),
        expression=exp.Tuple(expressions=[_col("s", c) for c in plan.columns]),
    )
    whens.append(exp.When(matched=False, condition=exp.EQ(this=op.copy(), expression=exp.Literal.string("upsert")), then=insert))
    merge = exp.Merge(this=relation(view_table, "t"), using=relation(diff, "s"), on=on, whens=exp.Whens(expressions=whens))
    return merge.sql(dialect=DIALECT)


