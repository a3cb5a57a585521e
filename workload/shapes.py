"""View shapes over the GitHub sources beside the two shipped views: the tests check each against its
full recompute, and the benchmark suite copies them to measure what one more view costs a batch."""

from __future__ import annotations

from collections.abc import Mapping

from catalog.declarations import SourceTable
from spark.planner import ViewPlan, plan_view
from spark.views import ViewDefinition, parse_view

# name -> (key columns, SQL)
SHAPES: dict[str, tuple[str, str]] = {
    # GROUP BY view keyed by a non-key column
    "stars_per_user": ("username", "SELECT s.username, count(*) AS stars, min(s.repo_name) AS first_repo FROM stars s GROUP BY s.username"),
    # windowed aggregate keyed by (entity, window): the key is an expression over the row
    "daily_prs": (
        "author, day",
        "SELECT p.author, date_trunc('DAY', p.created_at) AS day, count(*) AS prs, "
        "sort_array(collect_list(p.title)) AS titles FROM pull_requests p GROUP BY p.author, date_trunc('DAY', p.created_at)",
    ),
    # EXISTS and IN subqueries as filters
    "stargazers": (
        "email",
        "SELECT u.email, u.username FROM users u WHERE EXISTS (SELECT 1 FROM stars s WHERE s.username = u.username) "
        "AND u.username IN (SELECT author FROM pull_requests WHERE status = 'open')",
    ),
    # a link on expressions: the store has no index for it, so this view is maintained by scans
    "case_blind_stars": (
        "email",
        "SELECT u.email, (SELECT count(*) FROM stars s WHERE lower(s.username) = lower(u.username)) AS stars FROM users u",
    ),
    # many-to-many through the link table inside a correlated subquery
    "repo_fans": (
        "owner, name",
        "SELECT r.owner, r.name, (SELECT sort_array(collect_list(u.email)) FROM stars s JOIN users u ON u.username = s.username "
        "WHERE s.repo_owner = r.owner AND s.repo_name = r.name) AS fan_emails FROM repos r",
    ),
    # GROUP BY beyond the key (a column of the anchor row, whose primary key the key holds) and HAVING:
    # a repository's row goes when its last star does
    "starred_repos": (
        "owner, name",
        "SELECT r.owner, r.name, r.description, count(s.username) AS stars FROM repos r "
        "LEFT JOIN stars s ON s.repo_owner = r.owner AND s.repo_name = r.name "
        "GROUP BY r.owner, r.name, r.description HAVING count(s.username) > 0",
    ),
    # SELECT DISTINCT, keyed by its one output and by a key plus the columns it determines
    "stargazer_names": ("username", "SELECT DISTINCT s.username FROM stars s"),
    "starred_descriptions": (
        "owner, name",
        "SELECT DISTINCT r.owner, r.name, r.description FROM repos r JOIN stars s ON s.repo_owner = r.owner AND s.repo_name = r.name",
    ),
}

# Shapes whose links compare expressions: the local state has no index for them (maintained by scans).
SCANNED = frozenset({"case_blind_stars"})


def shape_view(name: str, copy_of: str | None = None) -> ViewDefinition:
    """The definition of shape `copy_of` (default: `name`) under the view name `name`."""
    key, sql = SHAPES[copy_of or name]
    return parse_view(f"-- @key: {key}\n{sql}", name)


def copies(shipped: Mapping[str, ViewDefinition], sources: Mapping[str, SourceTable], count: int) -> list[ViewPlan]:
    """`count` view plans: the shipped views first, then the indexed shapes, then numbered copies of
    them all in turn (`user_profile_2`, ...), so a batch maintains `count` views of mixed shapes."""
    kinds = [(name, definition.sql, definition.key) for name, definition in sorted(shipped.items())]
    kinds += [(name, sql, tuple(k.strip() for k in key.split(","))) for name, (key, sql) in SHAPES.items() if name not in SCANNED]
    plans: list[ViewPlan] = []
    for number in range(count):
        name, sql, key = kinds[number % len(kinds)]
        round_ = number // len(kinds)
        view = name if round_ == 0 else f"{name}_{round_ + 1}"
        plans.append(plan_view(ViewDefinition(name=view, key=key, sql=sql), sources))
    return plans
