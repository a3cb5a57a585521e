"""An independent model of the two shipped views, in plain Python over a workload's true state.

`state` is what `lakemv.workload.github.GitHubWorkload.state` holds: table name -> primary-key tuple -> row
dict, timestamps as int epoch microseconds (UTC). Nothing here uses Spark, SQL or lakemv's view code:
the semantics are written down directly from the views' contract, so a disagreement with the lake
means one of the two is wrong.

SQL NULL semantics are kept: a None join column (username, author, user_id, owner) never matches.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

Row = dict[str, Any]
State = Mapping[str, Mapping[tuple[Any, ...], Row]]

USER_PROFILE_COLUMNS = ("email", "username", "starred_repos", "pull_requests", "payment_verified")
USER_PROFILE_KEY = ("email",)
REPO_SUMMARY_COLUMNS = ("owner", "name", "description", "owner_email", "stars", "open_pull_requests", "contributors")
REPO_SUMMARY_KEY = ("owner", "name")


def _live(state: State, table: str) -> list[Row]:
    return list(state.get(table, {}).values())


def _sort_key(*values: Any) -> tuple[tuple[int, Any], ...]:
    """Ascending order with None last (never compared with a value); strings by code point."""
    return tuple((1, 0) if v is None else (0, v) for v in values)


def user_profile(state: State) -> list[Row]:
    """One row per live user, keyed by email."""
    descriptions: dict[tuple[str, str], str | None] = {}
    for repo in _live(state, "repos"):
        if repo["owner"] is not None and repo["name"] is not None:
            descriptions[(repo["owner"], repo["name"])] = repo["description"]

    starred: dict[str, list[Row]] = defaultdict(list)
    for star in _live(state, "stars"):
        if star["username"] is None:
            continue
        owner, name = star["repo_owner"], star["repo_name"]
        description = descriptions.get((owner, name)) if owner is not None and name is not None else None
        starred[star["username"]].append({"repo_owner": owner, "repo_name": name, "description": description})

    authored: dict[str, list[Row]] = defaultdict(list)
    for pr in _live(state, "pull_requests"):
        if pr["author"] is None:
            continue
        authored[pr["author"]].append(
            {
                "repo_owner": pr["repo_owner"],
                "repo": pr["repo"],
                "index": pr["index"],
                "title": pr["title"],
                "status": pr["status"],
                "created_at": pr["created_at"],
            }
        )

    verified_users: set[int] = set()
    for payment in _live(state, "payment_info"):
        if payment["user_id"] is not None and payment["verified"] is True:
            verified_users.add(payment["user_id"])

    rows = []
    for user in _live(state, "users"):
        username = user["username"]
        stars = starred.get(username, []) if username is not None else []
        prs = authored.get(username, []) if username is not None else []
        rows.append(
            {
                "email": user["email"],
                "username": username,
                "starred_repos": sorted(stars, key=lambda s: _sort_key(s["repo_owner"], s["repo_name"])),
                "pull_requests": sorted(prs, key=lambda p: _sort_key(p["repo_owner"], p["repo"], p["index"])),
                "payment_verified": user["id"] is not None and user["id"] in verified_users,
            }
        )
    return rows


def repo_summary(state: State) -> list[Row]:
    """One row per live repository, keyed by (owner, name)."""
    emails: dict[str, str] = {}
    for user in _live(state, "users"):
        username, email = user["username"], user["email"]
        if username is None or email is None:
            continue
        if username not in emails or email < emails[username]:
            emails[username] = email

    star_counts: dict[tuple[str, str], int] = defaultdict(int)
    for star in _live(state, "stars"):
        star_counts[(star["repo_owner"], star["repo_name"])] += 1

    open_counts: dict[tuple[str, str], int] = defaultdict(int)
    authors: dict[tuple[str, str], set[str]] = defaultdict(set)
    for pr in _live(state, "pull_requests"):
        repo_key = (pr["repo_owner"], pr["repo"])
        if pr["status"] == "open":
            open_counts[repo_key] += 1
        if pr["author"] is not None:
            authors[repo_key].add(pr["author"])

    rows = []
    for repo in _live(state, "repos"):
        owner, name = repo["owner"], repo["name"]
        joinable = owner is not None and name is not None
        repo_key = (owner, name)
        rows.append(
            {
                "owner": owner,
                "name": name,
                "description": repo["description"],
                "owner_email": emails.get(owner) if owner is not None else None,
                "stars": star_counts.get(repo_key, 0) if joinable else 0,
                "open_pull_requests": open_counts.get(repo_key, 0) if joinable else 0,
                "contributors": sorted(authors.get(repo_key, ())) if joinable else [],
            }
        )
    return rows


def stars_per_username(state: State) -> list[Row]:
    """The tests' small extra view `SELECT username, count(*) ... GROUP BY username`: live stars per username.

    As in SQL, GROUP BY puts every None username into one group of its own.
    """
    counts: dict[str | None, int] = defaultdict(int)
    for star in _live(state, "stars"):
        counts[star["username"]] += 1
    return [{"username": u, "stars": n} for u, n in counts.items()]
