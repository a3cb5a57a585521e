"""`lakemv explain`: a view's plan as text - its key, how each table's changes reach it, how it recomputes."""

from __future__ import annotations

from collections.abc import Mapping

import sqlglot
from sqlglot import exp

from lakemv.core.durations import format_duration
from lakemv.core.planner import OCCURRENCE, SELF, ViewPlan, over
from lakemv.core.planner.aggregates import delta_plan
from lakemv.core.planner.cost import Statistics, cost_lines, predict
from lakemv.core.planner.dag import dag_lines
from lakemv.core.sql.viewsql import recompute_sql
from lakemv.core.state.layout import NOT_CONSTANT, Lookup, constant, grain_route, route

ARROW = " -> "


def _occurrence(plan: ViewPlan, occ_id: int) -> str:
    occ = plan.occurrence(occ_id)
    return f"{occ.table} {occ.alias}"


def _chain_text(plan: ViewPlan, occ_id: int) -> str:
    steps = []
    for link in plan.chain(occ_id):
        child, parent = plan.occurrence(link.child).alias, plan.occurrence(link.parent).alias
        steps.append(" AND ".join(f"{over(c, child)} {op} {over(p, parent)}" for c, p, op in link.pairs))
    anchor = plan.anchor_of(occ_id)
    anchor_alias = plan.occurrence(anchor).alias
    keys = ", ".join(f"{over(k.expr, anchor_alias)} AS {k.name}" for k in plan.keys_at(anchor))
    return ARROW.join([*steps, f"key ({keys})"])


def explain(
    plan: ViewPlan,
    live: Mapping[str, str] | None = None,
    stats: Statistics | list[tuple[ViewPlan, Statistics]] | str | None = None,
    plans: Mapping[str, ViewPlan] | None = None,
) -> str:
    """Human-readable plan; with `live` (table -> live-rows SQL) the recompute SQL is appended; with
    `stats` (the mirrors' counts - per link tree, `lakemv.core.planner.cost.trees`, for a UNION ALL - or why there
    are none) the predicted cost per key; with `plans` (every view) the views it reads and that read it."""
    definition = plan.definition
    lines = [f"view {plan.name}" + (f"  ({definition.location})" if definition.location else "")]
    if definition.description:
        lines.append(f"  {definition.description}")
    sources = "; ".join(f"{plan.occurrence(b.anchor).table} {plan.occurrence(b.anchor).alias}, {plan.occurrence(b.anchor).context}" for b in plan.anchors)
    lines += [
        f"key: {', '.join(plan.key_names)}  (from {sources})",
        f"columns: {', '.join(plan.columns)}",
        f"reads: {', '.join(plan.tables)}",
        "",
        "affected keys - how a changed row (old and new image) reaches the view key:",
    ]
    order = [*(b.anchor for b in plan.anchors), *(link.child for link in plan.links)]
    width = max(len(_occurrence(plan, o)) for o in order)
    for occ_id in order:
        occ = plan.occurrence(occ_id)
        reach = _chain_text(plan, occ_id) if plan.reached_by(occ.table) else "not followed (enriched as of processing)"
        lines.append(f"  {_occurrence(plan, occ_id):<{width}}  [{occ.context}]  {reach}")
    lines += ["", "recompute of the affected keys - each table pre-filtered by its parent's rows:"]
    for occ_id in order:
        link = plan.link_of(occ_id)
        if link is None:
            alias = plan.occurrence(occ_id).alias
            rule = f"rows whose key is affected: ({', '.join(over(k.expr, alias) for k in plan.keys_at(occ_id))}) IN keys"
        else:
            child, parent = plan.occurrence(link.child).alias, plan.occurrence(link.parent).alias
            on = " AND ".join(f"{over(c, child)} {op} {over(p, parent)}" for c, p, op in link.pairs)
            rule = f"semi-join {_occurrence(plan, link.parent)} ON {on}"
        lines.append(f"  {_occurrence(plan, occ_id):<{width}}  {rule}")
    windows = _windows(plan)
    if windows:
        lines += ["", "windows - each partition is whole in a key's rows, so a change recomputes its partition with its key:"]
        lines += [f"  {w}" for w in windows]
    if plan.as_of_processing:
        anchor = plan.occurrence(plan.anchor).table
        others = ", ".join(t for t in plan.tables if t != anchor)
        lines += [
            "",
            f"enrichment as of processing - each {anchor} event's row is computed once, in the batch that ingests it,",
            f"  with the rows {others or 'it joins'} held then; their later changes reach no row of this view.",
        ]
    if plan.bound is not None:
        b = plan.bound
        lines += [
            "",
            f"time bound - {b.first}'s event time minus {b.second}'s is within [{format_duration(b.low)}, {format_duration(b.high)}]:",
            f"  the local state keeps a {b.first} event while {b.second}'s watermark plus the lower bound has not passed it,",
            f"  and a {b.second} event while {b.first}'s watermark minus the upper bound has not; then they are purged.",
        ]
    if plan.finality is not None:
        final = plan.finality
        lines += ["", f"event time - `{final.column}` is a window of {final.source}'s event time, ending at {final.end.format(start=final.column)}:"]
        if final.never is not None:
            lines.append(f"  window_final is always false: {final.never}.")
        else:
            waits = "".join(f" and {s}'s watermark at or past its end{_plus(offset)}" for s, offset, _ in final.joined)
            lines += [
                f"  window_final = the window ends at or before {final.source}'s watermark (newest event time minus its lateness){waits};",
                "  when the watermarks pass a window's end, its row is recomputed once and turns final.",
            ]
    lines += _aggregate_lines(plan)
    dag = dag_lines(plans, plan.name) if plans is not None and plan.name in plans else []
    if dag:
        lines += ["", *dag]
    lines += ["", *_state_lines(plan, order, width)]
    if isinstance(stats, Statistics):
        stats = [(plan, stats)]
    if isinstance(stats, list):
        for tree, counted in stats:
            lines.append("")
            if plan.branches:  # a UNION ALL: each branch's link tree on its own
                constants = ", ".join(f"{k.name} = {k.expr}" for k in tree.keys if SELF not in k.expr)
                lines.append(f"UNION ALL branch {constants}:")
            lines += cost_lines(tree, predict(tree, counted), counted, width)
    elif stats is not None:
        lines += ["", f"cost per key: not estimated: {stats}"]
    if plan.definition.freshness is not None:
        from lakemv.core.batch.deferral import refusal

        budget = format_duration(plan.definition.freshness)
        why = refusal(plan, route(plan).indexed)
        lines += ["", f"freshness budget {budget}: " + (
            f"maintained in every batch all the same: {why}." if why is not None
            else "each batch adds the keys it reaches to the view's pending keys in the local state; the view is "
            f"maintained and committed once its oldest pending key would wait past {budget} before the next batch."
        )]  # fmt: skip
    lines += [
        "",
        "then: diff against the view's rows (the store's digests, or the view table when scanning), MERGE",
        "rows whose content changed, delete keys that no longer produce a row, append the diff to the",
        f"change feed {plan.name}__changes.",
    ]
    if live is not None:
        lines += ["", "recompute SQL (keys in relation `_lmv_keys`):", recompute_sql(plan, live, "_lmv_keys")]
    return "\n".join(lines)


def _aggregate_lines(plan: ViewPlan) -> list[str]:
    """Which of the view's aggregates follow deltas (a changed row costs the same in any group) and which
    recompute their groups, and why (lakemv.core.planner.aggregates)."""
    found = delta_plan(plan)
    if isinstance(found, str):
        if sqlglot.parse_one(plan.body, read="spark").find(exp.AggFunc) is None:
            return []
        return ["", f"aggregates - each reached key's group is recomputed from its rows: {found}."]
    rows = "its changed rows (old images subtracted)" if found.rows is None else "the joined rows its changed rows reach (as they were subtracted)"
    return ["", f"aggregates - with the local state, each batch adds {rows} to the reached keys' states, {found.describe()}:",
            "  a changed row costs the same in a group of ten rows or ten million (exact: sums and averages of decimals and integers;",
            "  of floating-point values, a compensated sum, equal to a full run's within the error of summation order; a group whose",
            "  floating-point sum is infinite or NaN is recomputed)."]  # fmt: skip


def _windows(plan: ViewPlan) -> list[str]:
    """The view's window functions, as written (placeholders named back after their tables)."""
    aliases = {OCCURRENCE.format(o.id): o.table for o in plan.occurrences}
    shown = []
    for window in sqlglot.parse_one(plan.body, read="spark").find_all(exp.Window):
        text = " ".join(window.sql(dialect="spark").split())
        for placeholder, table in aliases.items():
            text = text.replace(placeholder, table)
        shown.append(text)
    return shown


def _lookup_text(hop: Lookup, derived: Mapping[str, str] | None = None) -> str:
    """A hop as `table by (column = .column, ...)`; a derived column shown as its expression, in brackets."""
    shown = [f"[{derived[c].replace(f'{SELF}.', '')}]" if derived and c in derived else c for c in hop.columns]
    on = ", ".join(f"{c} = .{u}" if not ns else f"{c} <=> .{u}" for c, u, ns in zip(shown, hop.using, hop.null_safe, strict=True))
    return f"{hop.table} by ({on})" + ("" if hop.exact else " (a superset, filtered by the view's SQL)")


def _key_source(expression: str) -> str:
    """Where a key that is no column of the rows comes from: a constant (read off in the driver, when it
    has the view column's type: lakemv.core.state.walk.direct_keys), or Spark's evaluation."""
    return expression if constant(expression) is not NOT_CONSTANT else "<evaluated by Spark>"


def _plus(offset: int) -> str:
    """` plus 1 hour` / ` minus 5 minutes` / nothing, for a joined stream's offset."""
    if offset == 0:
        return ""
    return f" {'plus' if offset > 0 else 'minus'} {format_duration(abs(offset))}"


def _state_lines(plan: ViewPlan, order: list[int], width: int) -> list[str]:
    """How the local indexed state serves the view: the lookups each hop makes, or why it cannot."""
    r = route(plan)
    if not r.indexed:
        return [f"local state: not used, every lookup scans the mirrors: {r.reason}"]
    lines = ["local state - lookups in the store instead of scans (`.c`: column c of the rows before):"]
    for occ_id in order:
        hops = [_lookup_text(h) for h in r.up[occ_id]]
        keys = plan.keys_at(plan.anchor_of(occ_id))
        columns = ", ".join(c if c is not None else _key_source(k.expr) for c, k in zip(r.key_columns[occ_id], keys, strict=True))
        lines.append(f"  {_occurrence(plan, occ_id):<{width}}  up: {ARROW.join([*hops, f'key from ({columns})'])}")
    for anchor_id, anchor in r.anchors.items():
        which = f" ({_occurrence(plan, anchor_id)}'s branch)" if len(r.anchors) > 1 else ""
        evaluated = " (each key expression's value kept per row, evaluated by Spark)" if any(c in r.derived for c in anchor.columns) else ""
        lines.append(f"  rows for the keys{which}: {_lookup_text(anchor, r.derived)}{evaluated}")
    for occ_id in order[len(r.anchors):]:
        lines.append(f"  {_occurrence(plan, occ_id):<{width}}  down: {_lookup_text(r.down[occ_id])}")
    grain = grain_route(plan)
    if grain is not None and grain.indexed:  # aggregates by delta over the grain: each changed row up to its rows
        grained = plan.at_grain()
        lines.append(f"  by delta, up to the rows of {_occurrence(plan, grained.anchor)}:")
        for occ_id in order:
            if occ_id != grained.anchor:
                lines.append(f"  {_occurrence(plan, occ_id):<{width}}  up: {ARROW.join(_lookup_text(h) for h in grain.up[occ_id]) or '(its own key)'}")
    return lines
