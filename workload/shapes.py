"""View shapes over the GitHub sources beside the two shipped views: the tests check each against its
full recompute, and the benchmark suite copies them to measure what one more view costs a batch."""

from __future__ import annotations

from collections.abc import Mapping

from lakemv.catalog.declarations import SourceTable
from lakemv.core.planner import ViewPlan, plan_view
from lakemv.core.planner.definitions import ViewDefinition, parse_view

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
    # a join on a declared unique key (users.username): one user per star
    "star_emails": (
        "username, repo_owner, repo_name",
        "SELECT s.username, s.repo_owner, s.repo_name, u.email FROM stars s LEFT JOIN users u ON u.username = s.username",
    ),
    # a LEFT JOIN chain: a star's repository, then its owner; a missing repository leaves both NULL
    "starred_owners": (
        "username, repo_owner, repo_name",
        "SELECT s.username, s.repo_owner, s.repo_name, r.description, o.email AS owner_email FROM stars s "
        "LEFT JOIN repos r ON r.owner = s.repo_owner AND r.name = s.repo_name LEFT JOIN users o ON o.username = r.owner",
    ),
    # NOT EXISTS: users who starred nothing
    "starless_users": (
        "email",
        "SELECT u.email, u.username FROM users u WHERE NOT EXISTS (SELECT 1 FROM stars s WHERE s.username = u.username)",
    ),
    # a scalar subquery inside a scalar subquery inside an IN: three levels of one equality chain
    "stars_of_busy_repos": (
        "email",
        "SELECT u.email, (SELECT count(*) FROM stars s WHERE s.username = u.username AND s.repo_name IN "
        "(SELECT r.name FROM repos r WHERE r.owner = s.repo_owner AND r.name = s.repo_name AND "
        "(SELECT count(*) FROM pull_requests p WHERE p.repo_owner = r.owner AND p.repo = r.name) > 0)) AS busy_stars FROM users u",
    ),
    # nested CTEs: the inner one grouped, the outer one passing its GROUP BY column on
    "star_counts_nested": (
        "email",
        "WITH outer_counts AS (WITH inner_counts AS (SELECT username, count(*) AS n FROM stars GROUP BY username) "
        "SELECT username, n FROM inner_counts) "
        "SELECT u.email, coalesce(c.n, 0) AS stars FROM users u LEFT JOIN outer_counts c ON c.username = u.username",
    ),
    # deterministic functions of every kind over one row
    "user_handles": (
        "email",
        "SELECT u.email, concat_ws('/', upper(u.username), cast(u.id AS STRING)) AS handle, "
        "date_format(u.registered_at, 'yyyy-MM') AS month, sha2(u.email, 256) AS digest, "
        "regexp_extract(u.email, '@(.*)$', 1) AS domain, coalesce(length(u.username), 0) AS name_length FROM users u",
    ),
    # higher-order array functions over aggregated lists
    "star_name_stats": (
        "username",
        "SELECT s.username, size(filter(collect_list(s.repo_name), x -> x LIKE 'l%')) AS l_repos, "
        "transform(sort_array(collect_list(s.repo_name)), x -> upper(x)) AS upper_names, "
        "aggregate(collect_list(length(s.repo_name)), 0, (acc, x) -> acc + x) AS name_chars, "
        "exists(collect_list(s.repo_owner), x -> x = 'ann') AS stars_ann FROM stars s GROUP BY s.username",
    ),
    # GROUP BY two columns, keyed by both
    "prs_by_status": (
        "author, status",
        "SELECT p.author, p.status, count(*) AS prs, sort_array(collect_list(p.repo)) AS repos FROM pull_requests p "
        "GROUP BY p.author, p.status",
    ),
    # a nested document: a struct holding a correlated subquery's list
    "user_documents": (
        "email",
        "SELECT u.email, named_struct('name', u.username, 'starred', (SELECT sort_array(collect_list(s.repo_name)) "
        "FROM stars s WHERE s.username = u.username)) AS document FROM users u",
    ),
    # a window partitioned by the key, in a CTE: each author's two latest pull requests
    "latest_prs": (
        "author",
        "WITH ranked AS (SELECT p.author, p.title, row_number() OVER (PARTITION BY p.author "
        "ORDER BY p.created_at DESC, p.repo_owner, p.repo, p.`index`) AS rn FROM pull_requests p) "
        "SELECT author, sort_array(collect_list(title)) AS latest FROM ranked WHERE rn <= 2 GROUP BY author",
    ),
    # ... and in a correlated subquery, partitioned by the column it is correlated on
    "last_pr_titles": (
        "email",
        "SELECT u.email, (SELECT max(t.title) FROM (SELECT p.title, p.author, rank() OVER (PARTITION BY p.author "
        "ORDER BY p.created_at DESC) AS r FROM pull_requests p) t WHERE t.author = u.username AND t.r = 1) AS last_title FROM users u",
    ),
    # HAVING over a two-column GROUP BY: a repository's row exists while it has two pull requests
    "busy_repos": (
        "repo_owner, repo",
        "SELECT p.repo_owner, p.repo, count(*) AS prs, count_if(p.status = 'merged') AS merged FROM pull_requests p "
        "GROUP BY p.repo_owner, p.repo HAVING count(*) >= 2",
    ),
    # a scalar subquery through a non-unique column (payment_info.user_id), its NULL made a value
    "verified_users": (
        "email",
        "SELECT u.email, coalesce((SELECT max(CAST(p.verified AS INT)) FROM payment_info p WHERE p.user_id = u.id), 0) = 1 "
        "AS verified FROM users u",
    ),
    # a fact row with two lookups: its author by a unique key, its repository by the primary key
    "pr_details": (
        "repo_owner, repo, index",
        "SELECT p.repo_owner, p.repo, p.`index`, p.title, u.email AS author_email, r.description FROM pull_requests p "
        "LEFT JOIN users u ON u.username = p.author LEFT JOIN repos r ON r.owner = p.repo_owner AND r.name = p.repo",
    ),
    # GROUP BY columns of tables joined by their keys (TPC-H Q3's o_orderdate): the key determines them,
    # through the repository's primary key and then its owner's unique username
    "repo_pr_owners": (
        "repo_owner, repo",
        "SELECT p.repo_owner, p.repo, r.description, u.email AS owner_email, count(*) AS prs FROM pull_requests p "
        "JOIN repos r ON r.owner = p.repo_owner AND r.name = p.repo LEFT JOIN users u ON u.username = r.owner "
        "GROUP BY p.repo_owner, p.repo, r.description, u.email",
    ),
    # EXISTS inside CASE: a classification from two other tables
    "user_kinds": (
        "email",
        "SELECT u.email, CASE WHEN EXISTS (SELECT 1 FROM pull_requests p WHERE p.author = u.username AND p.status = 'merged') "
        "THEN 'contributor' WHEN EXISTS (SELECT 1 FROM stars s WHERE s.username = u.username) THEN 'fan' ELSE 'visitor' END "
        "AS kind FROM users u",
    ),
    # a correlation with a non-equality beside the equality: stars of one's repositories by others
    "own_repo_fans": (
        "email",
        "SELECT u.email, (SELECT count(*) FROM stars s WHERE s.repo_owner = u.username AND s.username <> u.username) AS fans "
        "FROM users u",
    ),
    # a list of structs from a LEFT JOIN inside a correlated subquery: a repository's pull requests with
    # their authors' emails (a scalar subquery inside collect_list is what Spark 4.1 cannot run)
    "repo_pr_documents": (
        "owner, name",
        "SELECT r.owner, r.name, (SELECT sort_array(collect_list(named_struct('index', p.`index`, 'author', p.author, "
        "'email', u.email))) FROM pull_requests p LEFT JOIN users u ON u.username = p.author "
        "WHERE p.repo_owner = r.owner AND p.repo = r.name) AS prs FROM repos r",
    ),
    # keyed by an expression only: each month's sign-ups, a group recomputed whole
    "monthly_signups": (
        "month",
        "SELECT date_trunc('MONTH', u.registered_at) AS month, count(*) AS users, sort_array(collect_list(u.username)) AS names "
        "FROM users u GROUP BY date_trunc('MONTH', u.registered_at)",
    ),
    # a window partitioned by the GROUP BY key: each repository's first stargazer
    "first_fans": (
        "repo_owner, repo_name",
        "WITH ordered AS (SELECT s.repo_owner, s.repo_name, s.username, row_number() OVER (PARTITION BY s.repo_owner, "
        "s.repo_name ORDER BY s.created_at, s.username) AS nth FROM stars s) "
        "SELECT repo_owner, repo_name, max(CASE WHEN nth = 1 THEN username END) AS first_fan, count(*) AS fans FROM ordered "
        "GROUP BY repo_owner, repo_name",
    ),
    # global totals: one row, keyed by a constant; any change to users reaches it, recomputed over the table
    "user_totals": (
        "scope",
        "SELECT 'all' AS scope, count(*) AS users, count(DISTINCT u.username) AS names, max(u.registered_at) AS latest, "
        "count_if(u.id > 1) AS later_ids FROM users u",
    ),
    # ... and over a join: stars, and how many of them point at a repository that exists
    "star_totals": (
        "scope",
        "SELECT 'stars' AS scope, count(*) AS stars, count(r.name) AS of_known_repos FROM stars s "
        "LEFT JOIN repos r ON r.owner = s.repo_owner AND r.name = s.repo_name",
    ),
    # UNION ALL of two grouped branches, told apart by a constant in the key: stars and pull requests per person
    "people_counts": (
        "kind, who",
        "SELECT 'stars' AS kind, s.username AS who, count(*) AS n FROM stars s GROUP BY s.username UNION ALL "
        "SELECT 'prs', p.author, count(*) FROM pull_requests p JOIN repos r ON r.owner = p.repo_owner AND r.name = p.repo "
        "GROUP BY p.author",
    ),
    # UNION ALL of row-per-row branches, one with a subquery: a search directory of users and repositories
    "directory": (
        "kind, a, b",
        "SELECT 'user' AS kind, u.email AS a, '' AS b, u.username AS label, (SELECT count(*) FROM stars s "
        "WHERE s.username = u.username) AS weight FROM users u UNION ALL "
        "SELECT 'repo', r.owner, r.name, coalesce(r.description, r.name), (SELECT count(*) FROM stars s "
        "WHERE s.repo_owner = r.owner AND s.repo_name = r.name) FROM repos r",
    ),
}

# Shapes the local state has no index for (maintained by scans): links that compare expressions. (Keys
# with no plain column - an expression, a constant - are looked up by derived columns; a UNION ALL by
# an anchor lookup per branch.)
SCANNED = frozenset({"case_blind_stars"})


def shape_view(name: str, copy_of: str | None = None) -> ViewDefinition:
    """The definition of shape `copy_of` (default: `name`) under the view name `name`."""
    key, sql = SHAPES[copy_of or name]
    return parse_view(f"-- @key: {key}\n{sql}", name)


def copies(
    shipped: Mapping[str, ViewDefinition], sources: Mapping[str, SourceTable], count: int, freshness: int | None = None
) -> list[ViewPlan]:
    """`count` view plans: the shipped views first, then the indexed shapes, then numbered copies of
    them all in turn (`user_profile_2`, ...), so a batch maintains `count` views of mixed shapes.
    `freshness`: a budget (micros) for every view but `user_profile` (lakemv.core.batch.deferral)."""
    kinds = [(name, definition.sql, definition.key) for name, definition in sorted(shipped.items())]
    kinds += [(name, sql, tuple(k.strip() for k in key.split(","))) for name, (key, sql) in SHAPES.items() if name not in SCANNED]
    plans: list[ViewPlan] = []
    for number in range(count):
        name, sql, key = kinds[number % len(kinds)]
        round_ = number // len(kinds)
        view = name if round_ == 0 else f"{name}_{round_ + 1}"
        budget = freshness if view != "user_profile" else None
        plans.append(plan_view(ViewDefinition(name=view, key=key, sql=sql, freshness=budget), sources))
    return plans
