"""The CLI end to end: generate -> ingest in rounds -> query the tables and the views, against an
independent model, far from UTC.

`tests.viewmodel` states what `user_profile` and `repo_summary` must contain, computed in plain Python
from the generator's true state; here the CLI generates, ingests and queries, and the two must agree
after every round; the tables equal the generator's live rows, and the change feed logs every change.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from lakemv.core.cdc.coerce import iso_to_micros
from lakemv.workload.github import GitHubWorkload, WorkloadConfig
from tests import viewmodel
from tests.e2e.cli import assert_same_rows, lakemv, model_rows, move_round, queried_rows

Row = dict[str, Any]
SOURCE_TABLES = ("users", "stars", "repos", "pull_requests", "payment_info")

# Columns whose values are timestamps: (top-level column, nested field or None).
USER_PROFILE_TIMESTAMPS = (("pull_requests", "created_at"),)
# Field names, in order, of the structs in each view's list columns.
USER_PROFILE_STRUCTS = {
    "starred_repos": ("repo_owner", "repo_name", "description"),
    "pull_requests": ("repo_owner", "repo", "index", "title", "status", "created_at"),
}


# ---- helpers -------------------------------------------------------------------------------------------
def query_json(warehouse: Path, sql: str, env: dict[str, str] | None = None) -> list[Row]:
    out = lakemv("--warehouse", str(warehouse), "query", sql, "--format", "json", env=env).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def micros_back(rows: list[Row], timestamps: Iterable[tuple[str, str | None]]) -> list[Row]:
    """Timestamps printed as ISO-8601 UTC strings, back to epoch micros (also inside lists of structs)."""

    def convert(value: Any) -> Any:
        return iso_to_micros(value) if value is not None else None

    for row in rows:
        for column, field in timestamps:
            if field is None:
                row[column] = convert(row[column])
            elif row[column] is not None:
                row[column] = [None if e is None else {**e, field: convert(e[field])} for e in row[column]]
    return rows


def check_columns(name: str, rows: list[Row], columns: Sequence[str], structs: dict[str, Sequence[str]] | None = None) -> None:
    """Every JSON object has exactly the view's columns in order (and the struct fields in order)."""
    for row in rows:
        assert list(row) == list(columns), f"{name}: columns {list(row)}, expected {list(columns)}"
        for column, fields in (structs or {}).items():
            for element in row[column] or ():
                assert list(element) == list(fields), f"{name}.{column}: fields {list(element)}, expected {list(fields)}"


def check_model_is_not_trivial(state: dict) -> None:
    """The model itself must produce rows that exercise every column (else agreement proves little)."""
    profiles = viewmodel.user_profile(state)
    summaries = viewmodel.repo_summary(state)
    assert len(profiles) == len(state["users"]) > 0 and len(summaries) == len(state["repos"]) > 0
    assert any(p["starred_repos"] for p in profiles) and any(not p["starred_repos"] for p in profiles)
    assert any(p["pull_requests"] for p in profiles) and any(not p["pull_requests"] for p in profiles)
    assert any(p["payment_verified"] for p in profiles) and any(not p["payment_verified"] for p in profiles)
    assert any(len(p["starred_repos"]) > 1 for p in profiles) and any(len(p["pull_requests"]) > 1 for p in profiles)
    assert any(s["stars"] > 1 for s in summaries) and any(s["stars"] == 0 for s in summaries)
    assert any(s["open_pull_requests"] > 0 for s in summaries) and any(len(s["contributors"]) > 1 for s in summaries)
    assert any(s["owner_email"] is not None for s in summaries)


# ---- the views, round by round -------------------------------------------------------------------------
VIEWS: dict[str, tuple[Callable[[dict], list[Row]], Sequence[str], Sequence[str], tuple, dict]] = {
    "user_profile": (
        viewmodel.user_profile,
        viewmodel.USER_PROFILE_COLUMNS,
        viewmodel.USER_PROFILE_KEY,
        USER_PROFILE_TIMESTAMPS,
        USER_PROFILE_STRUCTS,
    ),
    "repo_summary": (viewmodel.repo_summary, viewmodel.REPO_SUMMARY_COLUMNS, viewmodel.REPO_SUMMARY_KEY, (), {}),
}


@pytest.mark.slow(160)
def test_tables_and_views_equal_the_model_after_every_round_in_any_time_zone(tmp_path, sources):
    staging, landing, warehouse = tmp_path / "staging", tmp_path / "landing", tmp_path / "wh"
    env = {"TZ": "Asia/Kolkata"}  # far from UTC, with a half-hour offset: printed instants must stay UTC
    config = WorkloadConfig(users=300, seed=11, rounds=4)
    lakemv("generate", "--out", str(staging), "--users", "300", "--seed", "11", "--rounds", "4", env=env)

    truth = GitHubWorkload(config, sources)
    emails_seen: set[str] = set()
    for number, _ in enumerate(truth.rounds()):
        assert move_round(staging, landing, number) > 0
        out = lakemv("--warehouse", str(warehouse), "ingest", "--landing", str(landing), "--once", env=env).stdout
        assert "ingested" in out and "0 dead letters" in out, out
        check_model_is_not_trivial(truth.state)
        emails_seen |= {u["email"] for u in truth.state["users"].values()}
        for view, (model, columns, key, timestamps, structs) in VIEWS.items():
            rows = query_json(warehouse, f"select * from {view}", env=env)
            check_columns(view, rows, columns, structs)
            assert_same_rows(view, micros_back(rows, timestamps), model(truth.state), key, f" after round {number}")
    assert not list(staging.glob("*/*.json")), "every generated file was moved into landing"
    # By the last round the NULL paths were exercised too: stars of gone repos, repos of gone owners, closed PRs.
    final_profiles, final_summaries = viewmodel.user_profile(truth.state), viewmodel.repo_summary(truth.state)
    assert any(s["description"] is None for p in final_profiles for s in p["starred_repos"])
    assert any(r["owner_email"] is None for r in final_summaries)
    assert any(pr["status"] != "open" for pr in truth.state["pull_requests"].values())

    # The tables too: every source's live rows, queried as a person would, equal the generator's truth.
    for name, source in truth.sources.items():
        assert queried_rows(warehouse, source, env=env) == model_rows(truth.live_rows(name), source), name
    # explain's cost section counts the live rows (DuckDB over the mirrors)
    out = lakemv("--warehouse", str(warehouse), "explain", "user_profile", env=env).stdout
    counts = ", ".join(f"{t} {len(list(truth.live_rows(t))):,}" for t in ("stars", "repos", "pull_requests", "payment_info", "users"))
    assert f"cost per key - averages over the live rows now ({counts} rows;" in out, out
    assert "  a key reads ~" in out, out

    feed = {r["op"]: r["n"] for r in query_json(warehouse, "select op, count(*) n from user_profile__changes group by op")}
    assert set(feed) <= {"upsert", "delete"}, feed
    # Every profile that ever existed at a round's end was upserted at least once; every one gone since, deleted.
    gone = emails_seen - {u["email"] for u in truth.state["users"].values()}
    assert gone, "the workload deleted users (else the delete check below proves nothing)"
    assert feed.get("upsert", 0) >= len(emails_seen), feed
    assert feed.get("delete", 0) >= len(gone), (feed, len(gone))


# ---- explain -------------------------------------------------------------------------------------------
def test_explain_names_every_table_read_and_an_unknown_view_is_one_error_line(tmp_path):
    out = lakemv("--warehouse", str(tmp_path / "wh"), "explain", "user_profile").stdout
    reads = [line for line in out.splitlines() if line.startswith("reads:")]
    assert len(reads) == 1, out
    assert set(reads[0].removeprefix("reads:").replace(",", " ").split()) == set(SOURCE_TABLES), reads[0]
    for table in SOURCE_TABLES:
        assert table in out
    assert "cost per key: not estimated: no rows ingested yet for stars, repos, pull_requests, payment_info, users" in out

    done = lakemv("--warehouse", str(tmp_path / "wh"), "explain", "nope", check=False)
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "no view named 'nope'" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


# ---- a user's own views folder -------------------------------------------------------------------------
BAD_VIEW = "-- @key: email\nSELECT u.email, count(*) OVER () AS n FROM users u\n"
GOOD_VIEW = "-- @key: username\nSELECT s.username, count(*) AS stars FROM stars s GROUP BY s.username\n"


@pytest.mark.slow(120)
def test_extra_views_folder_refuses_a_bad_view_and_maintains_a_good_one(tmp_path, sources):
    staging, landing, warehouse, extra = tmp_path / "staging", tmp_path / "landing", tmp_path / "wh", tmp_path / "mine"
    extra.mkdir()
    (extra / "bad.sql").write_text(BAD_VIEW)
    (extra / "user_stars.sql").write_text(GOOD_VIEW)
    env = {"LAKEMV_EXTRA_VIEWS_DIR": str(extra)}

    def one_error_line(*args: str) -> str:
        done = lakemv("--warehouse", str(warehouse), *args, env=env, check=False)
        assert done.returncode == 1, (args, done.returncode, done.stdout, done.stderr)
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:"), done.stderr
        assert "Traceback" not in done.stderr
        return lines[0]

    line = one_error_line("views")
    assert "view bad" in line and "window function" in line, line
    lakemv("generate", "--out", str(staging), "--users", "60", "--seed", "3", "--rounds", "2")
    for number in range(2):
        assert move_round(staging, landing, number) > 0
    line = one_error_line("ingest", "--landing", str(landing), "--once")  # refused before any work
    assert "view bad" in line and "window function" in line, line

    (extra / "bad.sql").unlink()
    out = lakemv("--warehouse", str(warehouse), "views", "--format", "json", env=env).stdout
    listed = {r["view"]: r for r in (json.loads(line) for line in out.splitlines() if line.strip())}
    assert set(listed) == {"user_profile", "repo_summary", "user_stars"}, listed
    assert listed["user_stars"]["key"] == "username" and listed["user_stars"]["reads"] == "stars", listed["user_stars"]

    out = lakemv("--warehouse", str(warehouse), "ingest", "--landing", str(landing), "--once", env=env).stdout
    assert "ingested" in out and "0 dead letters" in out, out
    truth = GitHubWorkload(WorkloadConfig(users=60, seed=3, rounds=2), sources)
    for _ in truth.rounds():
        pass
    expected = viewmodel.stars_per_username(truth.state)
    assert len(expected) > 1 and any(r["stars"] > 1 for r in expected), expected
    rows = query_json(warehouse, "select * from user_stars", env=env)
    check_columns("user_stars", rows, ("username", "stars"))
    assert_same_rows("user_stars", rows, expected, ("username",))
    # The shipped views are maintained alongside the user's own.
    assert_same_rows(
        "user_profile",
        micros_back(query_json(warehouse, "select * from user_profile", env=env), USER_PROFILE_TIMESTAMPS),
        viewmodel.user_profile(truth.state),
        viewmodel.USER_PROFILE_KEY,
    )

    # A backfill of an up-to-date view recomputes every key on a branch and writes nothing there; an edited view is rebuilt
    # by the next ingest, with no new landing files.
    out = " ".join(lakemv("--warehouse", str(warehouse), "backfill", "user_stars", env=env).stdout.split())
    assert f"backfilled user_stars: {len(expected)} rows; 0 upserted, 0 deleted on branch" in out, out
    (extra / "user_stars.sql").write_text(
        "-- @key: username\nSELECT s.username, count(*) AS stars, max(s.repo_name) AS last_repo FROM stars s GROUP BY s.username\n"
    )
    out = lakemv("--warehouse", str(warehouse), "ingest", "--landing", str(landing), "--once", env=env).stdout
    assert "built user_stars: all keys ->" in out, out
    rows = query_json(warehouse, "select * from user_stars", env=env)
    check_columns("user_stars", rows, ("username", "stars", "last_repo"))
    assert_same_rows("user_stars", [{k: r[k] for k in ("username", "stars")} for r in rows], expected, ("username",))
    assert "no view named 'nope'" in one_error_line("backfill", "nope")
