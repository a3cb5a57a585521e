"""Which views have no rows while the tables they read are empty (`ViewPlan.empty_over_empty`): such a
view, new on a lake with no rows yet, is marked built without a full recompute. DuckDB, which runs each
view's SQL verbatim over empty tables, is the judge: a view the planner calls empty must have no row."""

from __future__ import annotations

import duckdb
import pytest

from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.tables import mirror_arrow_schema
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import load_views, parse_view
from lakemv.duck.verify import duckdb_sql
from lakemv.workload.shapes import SHAPES, shape_view

# The aggregates with no GROUP BY: one row of totals, zeros and NULLs, over no input.
ONE_ROW = {"user_totals", "star_totals"}


@pytest.fixture(scope="module")
def empty_lake(sources):
    con = duckdb.connect()
    for name, source in sources.items():
        con.register(name, mirror_arrow_schema(source).empty_table())
    yield con
    con.close()


def _definitions():
    shipped = [(name, view) for name, view in load_views(LakeSettings().view_dirs).items()]
    return shipped + [(name, shape_view(name)) for name in SHAPES]


@pytest.mark.parametrize(("name", "view"), _definitions(), ids=[n for n, _ in _definitions()])
def test_a_view_called_empty_over_empty_tables_has_no_row_there(sources, empty_lake, name, view):
    plan = plan_view(view, sources)
    rows = empty_lake.execute(f"SELECT count(*) FROM ({duckdb_sql(view.sql)})").fetchone()[0]
    assert plan.empty_over_empty == (name not in ONE_ROW)
    assert (rows == 0) == plan.empty_over_empty, f"{name}: {rows} rows over empty tables"


def test_scalar_subqueries_give_values_not_rows(sources):
    """A global aggregate in a column, or under EXISTS, is a value per row of its query, not a row."""
    for sql in (
        "SELECT u.email, (SELECT count(*) FROM stars s WHERE s.username = u.username) AS n FROM users u",
        "SELECT u.email FROM users u WHERE EXISTS (SELECT max(s.repo_name) FROM stars s WHERE s.username = u.username)",
    ):
        assert plan_view(parse_view(f"-- @key: email\n{sql}", "v"), sources).empty_over_empty, sql
