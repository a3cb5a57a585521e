"""The manual's table (docs/views.md) "Refused, and the rewrite that works" stays true: every example is refused, every rewrite planned.

The table is read from docs/views.md: a key cell (`email`), an example cell holding one SQL code span, and a
rewrite cell holding one SQL code span, optionally preceded by its own key (key `author`: `WITH ...`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from lakemv.catalog.settings import PROJECT_ROOT
from lakemv.core.errors import ViewDefinitionError
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import ViewDefinition

CAPTION = "Refused, and the rewrite that works"
HEADER = ("what is refused", "key", "example", "why (the planner's reason, shortened)", "rewrite that is accepted")
CODE = r"`([^`]+)`"
# what the table must cover, as the first column names it
COVERED = ("non-equality join", "uncorrelated subquery", "cross join", "limit", "non-deterministic", "repeat a key",
           "group by", "partition by", "right / full join", "select *", "union")  # fmt: skip
# refusals that would mean the example is wrong, not outside the class
TYPOS = ("does not parse", "Unknown column", "not a declared source", "needs a name")


@dataclass(frozen=True)
class Row:
    refused: str
    key: tuple[str, ...]
    example: str
    rewrite_key: tuple[str, ...]
    rewrite: str


def _cells(line: str) -> list[str]:
    assert line.startswith("|") and line.endswith("|"), line
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line[1:-1])]


def _key(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(","))


def _only_code(cell: str, what: str) -> str:
    match = re.fullmatch(CODE, cell)
    assert match, f"the {what} cell must be one code span: {cell!r}"
    return match[1]


def readme_rows() -> list[Row]:
    lines = (PROJECT_ROOT / "docs" / "views.md").read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if CAPTION in line), None)
    assert start is not None, f"docs/views.md has no {CAPTION!r}"
    table_start = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("|"))
    table = []
    for line in lines[table_start:]:
        if not line.startswith("|"):
            break
        table.append(line.strip())
    header, rule, *body = table
    assert tuple(_cells(header)) == HEADER
    assert all(set(cell) <= {"-", ":"} for cell in _cells(rule))
    rows = []
    for line in body:
        refused, key, example, _why, rewrite = _cells(line)
        row_key = _key(_only_code(key, "key"))
        own = re.fullmatch(rf"key {CODE}: {CODE}", rewrite)
        rows.append(
            Row(
                refused=refused,
                key=row_key,
                example=_only_code(example, "example"),
                rewrite_key=_key(own[1]) if own else row_key,
                rewrite=own[2] if own else _only_code(rewrite, "rewrite"),
            )
        )
    return rows


ROWS = readme_rows()


def test_the_table_covers_the_refusals_the_readme_promises():
    refused = " ".join(row.refused for row in ROWS).lower()
    for construct in COVERED:
        assert construct in refused, construct


@pytest.mark.parametrize("row", ROWS, ids=[row.refused.replace("`", "") for row in ROWS])
def test_the_example_is_refused_and_the_rewrite_is_planned(sources, row: Row):
    with pytest.raises(ViewDefinitionError) as refusal:
        plan_view(ViewDefinition(name="readme_example", key=row.key, sql=row.example), sources)
    if row.refused != "unnamed expression":
        assert not any(typo in str(refusal.value) for typo in TYPOS), refusal.value
    plan = plan_view(ViewDefinition(name="readme_rewrite", key=row.rewrite_key, sql=row.rewrite), sources)
    assert plan.key_names == row.rewrite_key
