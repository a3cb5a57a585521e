"""Spark's `window()` in a view's GROUP BY, rewritten into plain arithmetic the planner can follow. Pure.

    SELECT repo, window.start AS hour, count(*) AS views FROM page_views GROUP BY repo, window(viewed_at, '1 hour')

Spark gives each row the struct `window` (start, end) of the tumbling window its event time falls
in. The same start is `timestamp_micros(unix_micros(t) - pmod(unix_micros(t) - offset, size))`: an
expression over the row, like `date_trunc`, so a changed event maps to exactly one key and a key
reads exactly its window's events. The rewrite replaces the GROUP BY call with that start, and
`window.start`, `window.end` and `window` in the SELECT with the start, the end and the struct.
DuckDB (`lakemv verify`) runs the same arithmetic.

A hopping window (`window(t, '1 hour', '20 minutes')`: a slide shorter than the size, which divides
it) puts each event in size/slide windows. It is the UNION ALL of the tumbling windows of its size
at each multiple of the slide as start offset: each branch is key-local, and the branches' window
starts never meet, so each key is one branch's (the planner checks that).
"""

from __future__ import annotations

import re

from sqlglot import exp

from lakemv.core.durations import parse_duration
from lakemv.core.errors import ViewDefinitionError

# sqlglot reads `GROUP BY window(...)` as the start of a WINDOW clause: the call is renamed before parsing.
# A string literal, a quoted identifier or a comment (left as they are), or a `window(` call.
CALL = re.compile(r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|`[^`]*`|--[^\n]*|/\*.*?\*/)|\bwindow(\s*\()""", re.IGNORECASE | re.DOTALL)
RENAMED = "lmv_time_window"


def rename_calls(text: str) -> str:
    """`text` with each `window(` call renamed (not inside a literal or comment), so that it parses
    wherever it stands."""
    return CALL.sub(lambda m: m.group(1) or f"{RENAMED}{m.group(2)}", text)


def _shown(node: exp.Expression) -> str:
    """A fragment of the SQL as the user wrote it (the renamed call named `window` again)."""
    return re.sub(RENAMED, "window", node.sql(dialect="spark"), flags=re.IGNORECASE)


def _is_window_call(node: exp.Expression) -> bool:
    return isinstance(node, exp.Anonymous) and node.name.lower() in ("window", RENAMED)


def _micros(view: str, node: exp.Expression, what: str) -> int:
    if not (isinstance(node, exp.Literal) and node.is_string):
        raise ViewDefinitionError(view, f"window(): the {what} must be a string literal such as '1 hour'", _shown(node))
    try:
        return parse_duration(node.name)
    except ValueError as exc:
        raise ViewDefinitionError(view, f"window(): {exc}", _shown(node)) from None


def rewrite_windows(view: str, tree: exp.Expression) -> exp.Expression:
    """`tree` (a parsed view) with its `window()` rewritten (see the module docstring)."""
    calls = [node for node in tree.find_all(exp.Anonymous) if _is_window_call(node)]
    if not calls:
        return tree
    texts = {_shown(c) for c in calls}
    if len(texts) > 1:
        raise ViewDefinitionError(view, f"a view may group by one window(); found {len(texts)}: {', '.join(sorted(texts))}")
    call = calls[0]
    if not 2 <= len(call.expressions) <= 4:
        raise ViewDefinitionError(view, "window() takes a time column, a size, and optionally a slide and a start offset", _shown(call))
    time, size = call.expressions[0], _micros(view, call.expressions[1], "size")
    slide = _micros(view, call.expressions[2], "slide") if len(call.expressions) > 2 else size
    offset = _micros(view, call.expressions[3], "start offset") if len(call.expressions) > 3 else 0
    if size <= 0:
        raise ViewDefinitionError(view, "window(): the size must be positive", _shown(call))
    if not 0 <= offset < slide:
        raise ViewDefinitionError(view, "window(): the start offset must be smaller than the slide", _shown(call))
    if slide > size:
        raise ViewDefinitionError(view, "window(): a slide longer than the size leaves events in no window; not supported", _shown(call))
    if size % slide:
        raise ViewDefinitionError(view, "window(): a hopping window's size must be a whole number of slides", _shown(call))
    column = time.sql(dialect="spark")
    if slide == size:
        return _tumbling(tree, column, size, offset)
    # Hopping: an event is in size/slide windows, one of each tumbling window of `size` whose start
    # offset is a multiple of the slide. Their union is the hopping window's rows; the branches' keys
    # differ in the window start's offset, so each key is one branch's (lakemv.core.planner's UNION ALL).
    with_ = tree.args.get("with_") or tree.args.get("with")
    body = tree.copy()
    body.set("with_" if "with_" in tree.args else "with", None)
    branches = [_tumbling(body, column, size, (offset + j * slide) % size) for j in range(size // slide)]
    union: exp.Expression = branches[0]
    for branch in branches[1:]:
        union = exp.union(union, branch, distinct=False)
    if with_ is not None:
        union.set("with_" if "with_" in tree.args else "with", with_.copy())
    return union


def window_start(column: str, size: int, offset: int) -> str:
    """Spark SQL of the start of the tumbling window of `size` (micros, starting at `offset`) `column` is in."""
    return f"timestamp_micros(unix_micros({column}) - pmod(unix_micros({column}) - {offset}, {size}))"


def _tumbling(tree: exp.Expression, column: str, size: int, offset: int) -> exp.Expression:
    """`tree` with its window() call and `window` references as the tumbling window of `size` at `offset`."""
    start = window_start(column, size, offset)
    end = f"timestamp_micros(unix_micros({start}) + {size})"  # over the start, which Spark finds among the GROUP BY
    start_node, end_node = (exp.maybe_parse(s, dialect="spark") for s in (start, end))

    def replace(node: exp.Expression) -> exp.Expression:
        if _is_window_call(node):
            return start_node.copy()
        if isinstance(node, exp.Dot) and _is_window_call(node.this) and node.name.lower() in ("start", "end"):
            return (start_node if node.name.lower() == "start" else end_node).copy()
        if isinstance(node, exp.Column) and node.table.lower() == "window" and node.name.lower() in ("start", "end"):
            return (start_node if node.name.lower() == "start" else end_node).copy()
        if isinstance(node, exp.Column) and not node.table and node.name.lower() == "window":
            struct = exp.maybe_parse(f"named_struct('start', {start}, 'end', {end})", dialect="spark")
            return exp.alias_(struct, "window") if isinstance(node.parent, exp.Select) else struct
        return node

    return tree.transform(replace)
