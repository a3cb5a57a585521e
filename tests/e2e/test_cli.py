"""The CLI end to end: the demo, and user mistakes (generate -> ingest in rounds -> query: test_views_cli).
The mistakes run in children forked from one process that imported the CLI (tests/e2e/forked_cli.py)."""

from __future__ import annotations

import pytest

from tests.e2e.cli import cli_env, lakemv
from tests.e2e.forked_cli import ForkedCli


@pytest.mark.slow(60)
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
def test_user_mistakes_print_one_clear_line(forked_cli: ForkedCli, tmp_path, args, message):
    done = forked_cli.run(["--warehouse", str(tmp_path / "wh"), *args], cli_env(), tmp_path)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], done.stderr
    assert "Traceback" not in done.stderr and "at org." not in done.stderr


BAD_VIEW = "-- @key: email\nSELECT u.email, nosuchfn(u.username) AS x FROM users u\n"


def _mistake_env(tmp_path, case: str) -> tuple[dict[str, str], list[str]]:
    """Environment and extra arguments that set up one kind of mistake."""
    (tmp_path / "a-file").write_text("not a folder\n")
    (tmp_path / "empty").mkdir(exist_ok=True)
    views = tmp_path / "bad-views"
    views.mkdir(exist_ok=True)
    (views / "bad.sql").write_text(BAD_VIEW)
    return {
        "bad view": ({"LAKEMV_EXTRA_VIEWS_DIR": str(views)}, []),
        "sources JSON": ({"LAKEMV_SOURCES_DIRS": '["/a",'}, []),
        "sources missing": ({"LAKEMV_SOURCES_DIRS": f"{tmp_path / 'nope'}"}, []),
        "views missing": ({"LAKEMV_VIEWS_DIR": f"{tmp_path / 'nope'}"}, []),
        "catalog down": ({"LAKEMV_CATALOG_URI": "postgresql://lake:pw@127.0.0.1:1/lake"}, []),
        "no prefect": ({"PREFECT_API_URL": "http://127.0.0.1:1/api"}, []),
        "partitions": ({"LAKEMV_SHUFFLE_PARTITIONS": "many"}, []),
        "none": ({}, []),
    }[case]


@pytest.mark.parametrize(
    ("case", "args", "message"),
    [
        ("bad view", ["views"], "view bad in `nosuchfn(u.username)`: Spark cannot analyse it"),
        ("bad view", ["explain", "user_profile"], "[UNRESOLVED_ROUTINE] Cannot resolve routine `nosuchfn`"),
        ("sources JSON", ["views"], "LAKEMV_SOURCES_DIRS: "),
        ("sources missing", ["status"], "sources folder does not exist"),
        ("views missing", ["views"], "views folder does not exist"),
        ("catalog down", ["status"], "LAKEMV_CATALOG_URI: cannot open the Iceberg catalog database"),
        ("catalog down", ["query", "select 1"], "LAKEMV_CATALOG_URI: cannot open the Iceberg catalog database"),
        ("no prefect", ["verify", "user_profile"], "cannot reach the Prefect API at http://127.0.0.1:1/api"),
        ("partitions", ["status"], "LAKEMV_SHUFFLE_PARTITIONS: Input should be a valid integer"),
        ("none", ["--warehouse", "{tmp}/a-file/wh", "status"], "cannot create the warehouse folder there: Not a directory"),
        ("none", ["--warehouse", "{tmp}/a-file/wh", "query", "select 1"], "cannot create the warehouse folder"),
        ("none", ["explain", "nope"], "no view named 'nope'"),
        ("none", ["verify", "nope"], "no view named 'nope'"),
        ("none", ["backfill", "nope"], "no view named 'nope'"),
        ("none", ["ingest", "--landing", "{tmp}/empty", "--once"], "the landing directory holds no files"),
        ("none", ["ingest", "--landing", "{tmp}/a-file", "--once"], "the landing path is a file"),
        ("none", ["generate", "--out", "{tmp}/a-file", "--users", "3"], "cannot create the output folder"),
        ("none", ["ingest", "--landing", "{tmp}/empty", "--trigger-seconds", "0"], "Invalid value for '--trigger-seconds'"),
        ("none", ["serve", "--landing", "{tmp}/empty", "--ingest-every", "0"], "Invalid value for '--ingest-every'"),
        ("none", ["compact", "--retention-hours", "0"], "Invalid value for '--retention-hours'"),
    ],
)
def test_every_kind_of_mistake_is_one_error_line(forked_cli: ForkedCli, tmp_path, case, args, message):
    env, _ = _mistake_env(tmp_path, case)
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if args[0] != "--warehouse":
        args = ["--warehouse", str(tmp_path / "wh"), *args]
    done = forked_cli.run(args, cli_env(env), tmp_path)
    assert done.returncode not in (0, 70), f"exit {done.returncode}:\n{done.stdout}\n{done.stderr}"
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], done.stderr
    assert "Traceback" not in done.stderr and "\tat " not in done.stderr


def test_a_view_spark_cannot_analyse_stops_ingest_at_start_with_one_line(tmp_path):
    _mistake_env(tmp_path, "none")
    views = tmp_path / "bad-views"
    landing = tmp_path / "landing"
    lakemv("generate", "--out", str(landing), "--users", "20", "--rounds", "1")
    env = {"LAKEMV_EXTRA_VIEWS_DIR": str(views)}
    done = lakemv("--warehouse", str(tmp_path / "wh"), "ingest", "--landing", str(landing), "--once", env=env, check=False)
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert errors == [errors[0]] and errors[0].startswith("error: view bad in `nosuchfn(u.username)`"), done.stderr
    assert "JSON" not in done.stderr and '"ts"' not in done.stderr and "\tat " not in done.stderr
    assert "ingested" not in done.stdout  # nothing was written before the check


def test_list_settings_take_a_path_or_comma_separated_paths(tmp_path):
    from lakemv.catalog.settings import PROJECT_ROOT

    sources = PROJECT_ROOT / "catalog" / "sources"
    extra = tmp_path / "more"
    extra.mkdir()
    (extra / "issues.toml").write_text('name = "issues"\nprimary_key = ["id"]\ncolumns = [{ name = "id", type = "bigint" }]\n')
    for typed in (str(sources), f"{sources},{extra}"):
        done = lakemv("--warehouse", str(tmp_path / "wh"), "status", "--format", "json", env={"LAKEMV_SOURCES_DIRS": typed})
        assert ('"issues"' in done.stdout) == ("," in typed), done.stdout


def test_bad_setting_is_a_clear_error(tmp_path):
    done = lakemv("query", "select 1", env={"LAKEMV_CATALOG_URI": "mysql://u@h/db", "LAKEMV_WAREHOUSE": str(tmp_path)}, check=False)
    assert done.returncode == 1 and done.stderr.startswith("error: LAKEMV_CATALOG_URI: catalog URI scheme 'mysql'")


def test_verify_before_the_first_ingest_is_a_skip_not_a_failure(tmp_path):
    done = lakemv("--warehouse", str(tmp_path / "wh"), "verify", "user_profile")
    assert "user_profile: not verified: it has no table yet" in " ".join(done.stdout.split()), done.stdout
