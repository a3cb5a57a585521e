"""SQL of aggregates by delta (`lakemv.core.planner.aggregates`): a key's aggregate state, the change
a batch's signed rows make to it, and the view's rows from the new state. Pure: Spark runs it.

A state row holds, per key: `_lmv_n` (the group's rows) and per aggregate i the columns its kind
needs: `s<i>` (a sum, typed as Spark types the aggregate's sum), `c<i>` (a count), `m<i>` (an
extreme), and for a sum or average of floating-point values `e<i>`: the rounding error the additions
of deltas made, carried as a compensated (Neumaier) sum does, so a state's error does not grow with
the batches it has seen (the row is `s<i> + e<i>`). The signed rows carry `_lmv_sign`: +1 for a new
image, -1 for an old one.

* `state_sql`: the state of every key over a relation of rows (a build, a reload, a group recomputed);
* `step_sql`: the old states (a relation, keys the batch reaches) plus the signed rows' deltas, as new
  states, with `_lmv_redo` true where an old image held a group's extreme, or a floating-point sum is
  not finite (an infinity or NaN cannot be subtracted again): its group is recomputed;
* `rows_sql`: the view's rows over new states (a grouped view drops a key whose group has no rows).

Every value comes out as the view's own SQL would give it: sums of decimals stay in the sum's decimal
type, an average is Spark's (the sum divided by the count as `avg` divides it, cast to avg's type), a
sum or average over no non-NULL value is NULL, `count` over none is 0. A floating-point sum is the
sum of the same values added in another order: equal to Spark's within the error of summation order
(`lakemv.duck.verify` compares doubles within `FLOAT_TOLERANCE`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lakemv.core.cdc.effects import SIGN
from lakemv.core.planner.aggregates import AGG, DeltaPlan
from lakemv.core.planner.model import SELF
from lakemv.core.sql.quote import q

ROWS = "_lmv_n"
REDO = "_lmv_redo"


def _keys(plan: DeltaPlan, alias: str) -> list[str]:
    return [f"{expr.replace(f'{SELF}.', f'{alias}.')} AS {q(name)}" for name, expr in plan.keys]


def _arg(arg: str | None, alias: str) -> str:
    return (arg or "").replace(f"{SELF}.", f"{alias}.")


def _avg_sum(arg: str, decimal: bool) -> str:
    """What Spark's avg sums: a decimal as it is, anything else as a double."""
    return arg if decimal else f"CAST({arg} AS DOUBLE)"


def state_columns(plan: DeltaPlan, floats: Sequence[int] = ()) -> list[str]:
    """The state's columns after the key columns, in order. `floats`: the sums and averages of
    floating-point values (with their error, `e<i>`)."""
    columns = [ROWS]
    for i, aggregate in enumerate(plan.aggregates):
        if aggregate.kind in ("sum", "avg"):
            columns += [f"s{i}", f"c{i}", *([f"e{i}"] if i in floats else [])]
        elif aggregate.kind in ("count", "count_if"):
            columns.append(f"c{i}")
        elif aggregate.kind in ("min", "max"):
            columns.append(f"m{i}")
    return columns


def state_sql(plan: DeltaPlan, rows: str, decimals: Sequence[int] = (), floats: Sequence[int] = ()) -> str:
    """Each key's state over relation `rows` (the table's columns). `decimals`: the aggregates whose
    argument is a decimal (an average sums it as it is); `floats`: as `state_columns`."""
    a = "_lmv_r"
    select = [*_keys(plan, a), f"count(*) AS {ROWS}"]
    for i, aggregate in enumerate(plan.aggregates):
        arg = _arg(aggregate.arg, a)
        if aggregate.kind in ("sum", "avg"):
            value = arg if aggregate.kind == "sum" else _avg_sum(arg, i in decimals)
            select += [f"sum({value}) AS s{i}", f"count({arg}) AS c{i}", *([f"CAST(0 AS DOUBLE) AS e{i}"] if i in floats else [])]
        elif aggregate.kind == "count":
            select.append(f"count({arg}) AS c{i}")
        elif aggregate.kind == "count_if":
            select.append(f"count_if({arg}) AS c{i}")
        elif aggregate.kind in ("min", "max"):
            select.append(f"{aggregate.kind}({arg}) AS m{i}")
    sql = f"SELECT {', '.join(select)} FROM {rows} AS {a}"
    if plan.where:
        sql += f" WHERE {_arg(plan.where, a)}"
    if plan.grouped:
        sql += f" GROUP BY {', '.join(str(n) for n in range(1, len(plan.keys) + 1))}"
    return sql


def step_sql(
    plan: DeltaPlan, signed: str, old: str, decimals: Sequence[int] = (), types: Mapping[str, str] | None = None, keys: str | None = None,
    floats: Sequence[int] = (),
) -> str:
    """New states of the keys the signed rows in `signed` reach, from their `old` states (a relation
    of `state_sql`'s columns; a key it lacks had no rows). `types`: each state column's Spark type,
    which the new state keeps (a sum's delta is cast back to the sum's type). `keys`: a relation of
    the keys to step (those its signed rows reach, and more: a key no row reaches keeps its state).
    `floats`: as `state_columns`."""
    a, types = "_lmv_r", types or {}
    delta = [*_keys(plan, a), f"sum({a}.{SIGN}) AS {ROWS}"]
    for i, aggregate in enumerate(plan.aggregates):
        arg = _arg(aggregate.arg, a)
        counted = f"sum(IF({arg} IS NULL, 0, {a}.{SIGN})) AS c{i}"
        if aggregate.kind in ("sum", "avg"):
            value = arg if aggregate.kind == "sum" else _avg_sum(arg, i in decimals)
            delta += [f"sum(IF({a}.{SIGN} > 0, {value}, -({value}))) AS s{i}", counted]
        elif aggregate.kind == "count":
            delta.append(counted)
        elif aggregate.kind == "count_if":
            delta.append(f"sum(IF({arg}, {a}.{SIGN}, 0)) AS c{i}")
        elif aggregate.kind in ("min", "max"):
            delta += [f"{aggregate.kind}(IF({a}.{SIGN} > 0, {arg}, NULL)) AS m{i}", f"{aggregate.kind}(IF({a}.{SIGN} < 0, {arg}, NULL)) AS r{i}"]
    d = f"SELECT {', '.join(delta)} FROM {signed} AS {a}"
    if plan.where:
        d += f" WHERE {_arg(plan.where, a)}"
    if plan.grouped:
        d += f" GROUP BY {', '.join(str(n) for n in range(1, len(plan.keys) + 1))}"

    def typed(column: str, value: str) -> str:
        return f"CAST({value} AS {types[column]})" if column in types else value

    names = [name for name, _ in plan.keys]
    side = "k" if keys is not None else "d"
    select = [f"{side}.{q(n)} AS {q(n)}" for n in names]
    select.append(f"{typed(ROWS, f'coalesce(o.{ROWS}, 0) + coalesce(d.{ROWS}, 0)')} AS {ROWS}")
    redo = []
    for i, aggregate in enumerate(plan.aggregates):
        count = f"coalesce(o.c{i}, 0) + coalesce(d.c{i}, 0)"
        if aggregate.kind in ("sum", "avg") and i in floats:  # a compensated sum (Neumaier): the error of each addition kept
            was, add = f"coalesce(o.s{i}, 0D)", f"coalesce(d.s{i}, 0D)"
            error = f"IF(abs({was}) >= abs({add}), ({was} - ({was} + {add})) + {add}, ({add} - ({was} + {add})) + {was})"
            select.append(f"{typed(f's{i}', f'IF({count} = 0, NULL, {was} + {add})')} AS s{i}")
            select.append(f"{typed(f'c{i}', count)} AS c{i}")
            select.append(f"{typed(f'e{i}', f'IF({count} = 0, 0D, coalesce(o.e{i}, 0D) + {error})')} AS e{i}")
            redo.append(f"NOT coalesce({_finite(f'o.s{i}')} AND {_finite(f'd.s{i}')} AND {_finite(f'{was} + {add}')}, TRUE)")
        elif aggregate.kind in ("sum", "avg"):
            select.append(f"{typed(f's{i}', f'IF({count} = 0, NULL, coalesce(o.s{i}, 0) + coalesce(d.s{i}, 0))')} AS s{i}")
            select.append(f"{typed(f'c{i}', count)} AS c{i}")
        elif aggregate.kind in ("count", "count_if"):
            select.append(f"{typed(f'c{i}', count)} AS c{i}")
        elif aggregate.kind in ("min", "max"):
            better = "least" if aggregate.kind == "min" else "greatest"
            reached = f"d.r{i} IS NOT NULL AND o.m{i} IS NOT NULL AND d.r{i} {'<=' if aggregate.kind == 'min' else '>='} o.m{i}"
            redo.append(f"({reached})")
            select.append(f"{typed(f'm{i}', f'IF({reached}, NULL, {better}(o.m{i}, d.m{i}))')} AS m{i}")
    select.append(f"{' OR '.join(redo) if redo else 'FALSE'} AS {REDO}")
    def on(alias: str) -> str:
        return " AND ".join(f"{alias}.{q(n)} <=> {side}.{q(n)}" for n in names)

    if keys is None:
        return f"SELECT {', '.join(select)} FROM ({d}) AS d LEFT JOIN {old} AS o ON {on('o')}"
    return f"SELECT {', '.join(select)} FROM {keys} AS k LEFT JOIN ({d}) AS d ON {on('d')} LEFT JOIN {old} AS o ON {on('o')}"


def _finite(value: str) -> str:
    """SQL: `value` is neither infinite nor NaN (NULL stays NULL)."""
    return f"(NOT isnan({value}) AND abs({value}) < CAST('Infinity' AS DOUBLE))"


def rows_sql(
    plan: DeltaPlan, states: str, columns: Sequence[str], types: Mapping[str, str], decimals: Sequence[int] = (), extra: Sequence[str] = (),
    floats: Sequence[int] = (),
) -> str:
    """The view's rows (its `columns`, each cast to its Spark type in `types`) over the relation
    `states` of new states; a grouped view's key with no rows left has none. With `extra` (columns of
    the states to pass on), every state's row, the caller telling them apart. `floats`: as `state_columns`."""
    values: dict[str, str] = {}
    for i, aggregate in enumerate(plan.aggregates):
        if aggregate.kind == "rows":
            values[AGG.format(i)] = f"s.{ROWS}"
        elif aggregate.kind in ("count", "count_if"):
            values[AGG.format(i)] = f"s.c{i}"
        elif aggregate.kind == "sum":
            values[AGG.format(i)] = f"s.s{i} + s.e{i}" if i in floats else f"s.s{i}"
        elif aggregate.kind == "avg":  # as Spark's avg divides: a decimal sum by the count as a decimal(20,0)
            divisor = f"CAST(s.c{i} AS DECIMAL(20,0))" if i in decimals else f"CAST(s.c{i} AS DOUBLE)"
            total = f"(s.s{i} + s.e{i})" if i in floats else f"s.s{i}"
            values[AGG.format(i)] = f"IF(s.c{i} = 0, NULL, {total} / {divisor})"
        else:
            values[AGG.format(i)] = f"s.m{i}"
    outputs = {o.name: o.template for o in plan.outputs}
    keys = {name for name, _ in plan.keys}
    select = []
    for column in columns:
        if column in keys:
            value = f"s.{q(column)}"
        else:
            value = outputs[column]
            for placeholder, state in sorted(values.items(), key=lambda item: -len(item[0])):  # _lmv_agg_10 before _lmv_agg_1
                value = value.replace(placeholder, f"({state})")
        select.append(f"CAST({value} AS {types[column]}) AS {q(column)}" if column in types else f"{value} AS {q(column)}")
    select += [f"s.{c} AS {c}" for c in extra]
    sql = f"SELECT {', '.join(select)} FROM {states} AS s"
    return sql + (f" WHERE s.{ROWS} > 0" if plan.grouped and not extra else "")
