"""An update of columns a view does not read reaches none of its keys (lakemv.core.cdc.effects.CHANGED),
and the view stays equal to its recompute: `user_profile` lists each starred repo's description, not
its star count, which changes far more often."""

from __future__ import annotations

import pytest

from lakemv.catalog.settings import LakeSettings
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import load_views
from lakemv.core.state.store import Store
from lakemv.spark.batch.runner import BatchProcessor
from tests.cdc import at, dbz, user
from tests.integration.test_view_properties import assert_views_are_fresh


def repo(stars: int, description: str = "ponds") -> dict:
    return {"owner": "cy", "name": "pond", "description": description, "star_count": stars, "fork_count": 0,
            "created_at": 1_709_294_400_000, "updated_at": None}  # fmt: skip


@pytest.mark.slow(40)
def test_an_update_no_view_reads_reaches_no_key(lake, tmp_path):
    plans = [plan_view(v, lake.sources) for v in load_views(LakeSettings().view_dirs).values()]
    p = BatchProcessor(lake.spark, lake.names, lake.sources, plans, store=Store(tmp_path / "state.sqlite"))
    star = {"username": "ann", "repo_owner": "cy", "repo_name": "pond", "created_at": 1_709_294_400_000_000}
    p.process_lines(0, [(dbz("c", 1, user("a@x.io", "ann")), at("users")), (dbz("c", 2, repo(1)), at("repos")),
                        (dbz("c", 3, star), at("stars"))])  # fmt: skip
    counted = p.process_lines(1, [(dbz("u", 4, repo(2), repo(1)), at("repos"))])
    assert counted.merged == {"repos": 1}
    assert {v: r.keys for v, r in counted.views.items()} == {"user_profile": 0, "repo_summary": 0}, counted.describe()
    described = p.process_lines(2, [(dbz("u", 5, repo(2, "lakes"), repo(2)), at("repos"))])
    assert {v: r.keys for v, r in described.views.items()} == {"user_profile": 1, "repo_summary": 1}, described.describe()
    assert described.views["user_profile"].upserts == 1
    assert_views_are_fresh(lake, p)
