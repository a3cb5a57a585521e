"""SQL of the incremental step, generated from a ViewPlan. Pure: tests check the text, Spark runs it.

* `affected_keys_sql`: changed rows (old and new images, one temp view per table) -> view keys, by
  joining each changed row's link columns up its chain of live tables to the anchor.
* `recompute_sql`: the view restricted to a set of keys. Each table occurrence is replaced by a CTE:
  the anchor semi-joined with the keys, every other occurrence semi-joined with its parent's CTE on
  the link equalities. With no keys (a backfill) each CTE is just the live table.
* `diff_sql`: recomputed rows full-outer-joined with the view table's rows for the same keys; keeps
  only rows whose content changed (`upsert`) and keys that no longer produce a row (`delete`).
* `merge_sql` / `feed_insert_sql`: apply a materialised diff to the view table and its change feed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lakemv.core.batch.records import FEED_COLUMNS
from lakemv.core.planner import OCCURRENCE, KeyColumn, ViewPlan, over
from lakemv.core.planner.finality import final_rows_sql
from lakemv.core.sql.quote import q

Watermarks = Mapping[str, "int | None"]

DIFF_OP = "_lmv_diff"  # a diff row's action: upsert, delete or held (the mirrors' _lmv_op is a Debezium op)
NEW_MARK = "_lmv_n"
OLD_MARK = "_lmv_o"
ROWS_MARK = "_lmv_rows"  # how many recomputed rows share the key (more than one: held)




def _on(pairs: Sequence[tuple[str, str, str]], child: str, parent: str) -> str:
    return " AND ".join(f"{over(c, child)} {op} {over(p, parent)}" for c, p, op in pairs)


def _key_match(key_columns: Sequence[KeyColumn], keys: str, alias: str) -> str:
    return " AND ".join(f"{keys}.{q(k.name)} <=> {over(k.expr, alias)}" for k in key_columns)  # a NULL group is a key


def filtered_ctes(plan: ViewPlan, live: Mapping[str, str], keys: str | None) -> list[tuple[str, str]]:
    """(name, SQL) of the relation that stands for each occurrence, parents before children."""
    if keys is None:
        order = [*(b.anchor for b in plan.anchors), *(link.child for link in plan.links)]
        return [(OCCURRENCE.format(o), live[plan.occurrence(o).table]) for o in order]
    ctes = []
    for branch in plan.anchors:  # a UNION ALL branch reads nothing for another branch's keys
        anchor = plan.occurrence(branch.anchor)
        match = _key_match(branch.keys, "k", "a")
        ctes.append((OCCURRENCE.format(anchor.id), f"SELECT a.* FROM ({live[anchor.table]}) AS a LEFT SEMI JOIN {keys} AS k ON {match}"))
    for link in plan.links:
        table = plan.occurrence(link.child).table
        ctes.append(
            (
                OCCURRENCE.format(link.child),
                f"SELECT c.* FROM ({live[table]}) AS c LEFT SEMI JOIN {OCCURRENCE.format(link.parent)} AS p "
                f"ON {_on(link.pairs, 'c', 'p')}",
            )
        )
    return ctes


def _with(ctes: Sequence[tuple[str, str]]) -> str:
    return "WITH " + ",\n".join(f"{name} AS ({sql})" for name, sql in ctes)


def rows_sql(plan: ViewPlan, watermarks: Watermarks | None = None) -> str:
    """The view's planned body, with `window_final` judged by `watermarks` when it has a window."""
    return final_rows_sql(plan.body, plan.finality, watermarks or {})


def recompute_sql(plan: ViewPlan, live: Mapping[str, str], keys: str | None = None, watermarks: Watermarks | None = None) -> str:
    """The view's rows for the keys in relation `keys` (all rows when None)."""
    return f"{_with(filtered_ctes(plan, live, keys))}\n{rows_sql(plan, watermarks)}"


def chain_sql(plan: ViewPlan, occ_id: int, delta: str, live: Mapping[str, str]) -> str:
    """Keys reached from the rows of `delta` read as occurrence `occ_id`."""
    chain = list(plan.chain(occ_id))
    key_exprs = [k.expr for k in plan.keys_at(plan.anchor_of(occ_id))]
    # The last hop into the anchor can be skipped when the link already carries the key columns; its
    # `=` would not have matched a NULL, so neither does the skipped hop. Otherwise a NULL key is a key
    # (a GROUP BY's NULL group is a row of the view).
    where = ""
    if chain:
        carried = {parent: child for child, parent, op in chain[-1].pairs if op == "="}
        if all(e in carried for e in key_exprs):
            key_exprs = [carried[e] for e in key_exprs]
            chain = chain[:-1]
            where = "WHERE " + " AND ".join(f"{over(e, f'x{len(chain)}')} IS NOT NULL" for e in key_exprs)
    joins = []
    for index, link in enumerate(chain):
        parent_table = plan.occurrence(link.parent).table
        joins.append(f"JOIN ({live[parent_table]}) AS x{index + 1} ON {_on(link.pairs, f'x{index}', f'x{index + 1}')}")
    alias = f"x{len(chain)}"
    select = ", ".join(f"{over(e, alias)} AS {q(k.name)}" for e, k in zip(key_exprs, plan.keys, strict=True))
    return " ".join([f"SELECT {select} FROM {delta} AS x0", *joins, *([where] if where else [])])


def affected_key_queries(plan: ViewPlan, live: Mapping[str, str], deltas: Mapping[str, str]) -> list[str]:
    """One query per occurrence of a changed table: the view keys its changed rows reach (repeats possible)."""
    return [chain_sql(plan, o.id, deltas[o.table], live) for o in plan.occurrences if o.table in deltas]


def old_rows_sql(plan: ViewPlan, view_table: str, keys: str) -> str:
    """The view table's rows for the keys in relation `keys`."""
    match = " AND ".join(f"k.{q(k)} <=> v.{q(k)}" for k in plan.key_names)
    return f"SELECT v.* FROM {view_table} AS v LEFT SEMI JOIN {keys} AS k ON {match}"


def affected_keys_sql(plan: ViewPlan, live: Mapping[str, str], deltas: Mapping[str, str]) -> str | None:
    """Distinct view keys reached from the changed rows in `deltas` (table -> relation), or None."""
    parts = affected_key_queries(plan, live, deltas)
    if len(parts) == 1:  # UNION is what makes several parts distinct
        names = ", ".join(q(k.name) for k in plan.keys)
        return f"SELECT DISTINCT {names} FROM ({parts[0]}) AS _lmv_keys"
    return "\nUNION\n".join(parts) if parts else None


def diff_sql(plan: ViewPlan, live: Mapping[str, str], view_table: str, keys: str | None, watermarks: Watermarks | None = None) -> str:
    """Rows to upsert (content differs or new) and keys to delete, for `keys` (all when None)."""
    ctes = filtered_ctes(plan, live, keys)
    partition = ", ".join(q(k) for k in plan.key_names)
    ctes.append(
        (q("_lmv_new"), f"SELECT *, TRUE AS {NEW_MARK}, count(*) OVER (PARTITION BY {partition}) AS {ROWS_MARK} FROM ({rows_sql(plan, watermarks)}) AS _lmv_body")
    )
    old = f"SELECT v.* FROM {view_table} AS v" if keys is None else old_rows_sql(plan, view_table, keys)
    ctes.append((q("_lmv_old"), f"SELECT o.*, TRUE AS {OLD_MARK} FROM ({old}) AS o"))
    key_names = plan.key_names
    values = [c for c in plan.columns if c not in key_names]
    select = [f"coalesce(n.{q(k)}, o.{q(k)}) AS {q(k)}" for k in key_names]
    select += [f"n.{q(c)} AS {q(c)}" for c in values]
    # a key with several new rows (a declared unique key violated: lakemv.core.cdc.unique) is 'held': left alone
    select.append(f"CASE WHEN n.{NEW_MARK} IS NULL THEN 'delete' WHEN n.{ROWS_MARK} > 1 THEN 'held' ELSE 'upsert' END AS {DIFF_OP}")
    join = " AND ".join(f"n.{q(k)} <=> o.{q(k)}" for k in key_names)
    changed = [f"n.{NEW_MARK} IS NULL", f"o.{OLD_MARK} IS NULL", f"n.{ROWS_MARK} > 1"]
    if values:
        changed.append("NOT (" + " AND ".join(f"n.{q(c)} <=> o.{q(c)}" for c in values) + ")")
    return (
        f"{_with(ctes)}\nSELECT {', '.join(select)} FROM {q('_lmv_new')} AS n "
        f"FULL OUTER JOIN {q('_lmv_old')} AS o ON {join} WHERE {' OR '.join(changed)}"
    )


def merge_sql(plan: ViewPlan, view_table: str, diff: str, prefilter: str | None = None) -> str:
    """MERGE a materialised diff into the view table: delete, update changed content, insert new keys.

    `prefilter`: a predicate on the view's key columns true for every key of the diff (lakemv.core.sql.quote).
    """
    on = " AND ".join([f"t.{q(k)} <=> s.{q(k)}" for k in plan.key_names] + ([prefilter] if prefilter else []))
    values = [c for c in plan.columns if c not in plan.key_names]
    clauses = [f"WHEN MATCHED AND s.{DIFF_OP} = 'delete' THEN DELETE"]
    if values:
        clauses.append("WHEN MATCHED THEN UPDATE SET " + ", ".join(f"t.{q(c)} = s.{q(c)}" for c in values))
    columns = ", ".join(q(c) for c in plan.columns)
    clauses.append(
        f"WHEN NOT MATCHED AND s.{DIFF_OP} = 'upsert' THEN INSERT ({columns}) "
        f"VALUES ({', '.join(f's.{q(c)}' for c in plan.columns)})"
    )
    return f"MERGE INTO {view_table} t USING {diff} s ON {on} " + " ".join(clauses)


def feed_insert_sql(plan: ViewPlan, feed_table: str, diff: str, batch_id: int | None, position: int | None) -> str:
    """Append a diff to the change feed: key, op, the new row (NULL on delete), batch id, position."""
    row = ", ".join(f"'{c}', s.{q(c)}" for c in plan.columns)
    values = {
        "op": f"s.{DIFF_OP}",
        "row": f"CASE WHEN s.{DIFF_OP} = 'upsert' THEN named_struct({row}) END",
        "batch_id": "CAST(NULL AS BIGINT)" if batch_id is None else f"CAST({int(batch_id)} AS BIGINT)",
        "source_position": "CAST(NULL AS BIGINT)" if position is None else f"CAST({int(position)} AS BIGINT)",
        "changed_at": "current_timestamp()",
    }
    select = [f"s.{q(k)}" for k in plan.key_names] + [f"{values[name]} AS {name}" for name in FEED_COLUMNS]
    return f"INSERT INTO {feed_table} SELECT {', '.join(select)} FROM {diff} s"
