"""The CLI end to end: generate -> ingest in rounds -> query, against the generator's own truth."""

from __future__ import annotations

import pytest

from tests.e2e.cli import lakemv, model_rows, move_round, queried_rows
from workload.github import GitHubWorkload, WorkloadConfig


def test_generate_ingest_in_rounds_query_equals_truth_in_any_time_zone(tmp_path, sources):
    staging, landing, warehouse = tmp_path / "staging", tmp_path / "landing", tmp_path / "wh"
    # A machine far from UTC: values must still be stored and printed as UTC instants.
    env = {"TZ": "America/Los_Angeles"}
    lakemv("generate", "--out", str(staging), "--users", "300", "--seed", "5", "--rounds", "3", env=env)
    for number in range(3):
        assert move_round(staging, landing, number) > 0
        out = lakemv("--warehouse", str(warehouse), "ingest", "--landing", str(landing), "--once", env=env).stdout
        assert "ingested" in out and "0 dead letters" in out

    truth = GitHubWorkload(WorkloadConfig(users=300, seed=5, rounds=3), sources)
    for _ in truth.rounds():
        pass
    for name, source in truth.sources.items():
        assert queried_rows(warehouse, source, env=env) == model_rows(truth.live_rows(name), source), name


def test_demo_runs_end_to_end_and_prints_rows(tmp_path):
    out = lakemv("--warehouse", str(tmp_path / "wh"), "demo", "--users", "100", "--rounds", "2").stdout
    for table in ("users", "repos", "pull_requests", "stars", "payment_info"):
        assert f"{table}: " in out and "live rows" in out
    assert "@example.com" in out  # rows of the lake were printed, not just counts


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["query", "select * from nope"], "Table with name nope does not exist"),
        (["query", "selec 1"], "syntax error"),
        (["ingest", "--landing", "/no/such/dir", "--once"], "landing directory does not exist"),
        (["query", "select 1", "--bogus"], "No such option: --bogus"),
        (["query", "select 1", "--format", "xml"], "Invalid value for '--format'"),
        (["generate", "--out", "x", "--users", "0"], "Invalid value for '--users'"),
        (["frobnicate"], "No such command 'frobnicate'"),
    ],
)
def test_user_mistakes_print_one_clear_line(tmp_path, args, message):
    done = lakemv("--warehouse", str(tmp_path / "wh"), *args, check=False)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], done.stderr
    assert "Traceback" not in done.stderr and "at org." not in done.stderr


def test_bad_setting_is_a_clear_error(tmp_path):
    done = lakemv("query", "select 1", env={"LAKEMV_CATALOG_URI": "mysql://u@h/db", "LAKEMV_WAREHOUSE": str(tmp_path)}, check=False)
    assert done.returncode == 1 and done.stderr.startswith("error: LAKEMV_CATALOG_URI: catalog URI scheme 'mysql'")
