"""A catalogue of the mistakes users make, each through the real `lakemv` command: every one ends as
ONE line on stderr that starts with `error:` and names the cause — no trace (Python's or Java's), no
`internal error`, no credential echoed — with exit code 1 (a lakemv error) or 2 (a usage error).

Only commands that fail before Spark or a Prefect API starts: each runs in a child forked from one
process that imported the CLI once (tests/e2e/forked_cli.py): the 138 cases took 26 s of a CI run,
against about 170 s with a new interpreter each.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from lakemv.catalog.settings import PROJECT_ROOT
from tests.e2e.forked_cli import ForkedCli

pytestmark = pytest.mark.e2e

SOURCES = str(PROJECT_ROOT / "catalog" / "sources")
NEVER = ("Traceback", "internal error", "\tat ", "java.")  # nowhere in stderr


@pytest.fixture(autouse=True)
def _shared_prefect_api() -> None:
    """Overrides tests/e2e/conftest.py's: these commands record no flow run, so no session Prefect API."""
    return None


def _lay_out(tmp: Path) -> None:
    """The files the mistakes point at."""
    (tmp / "a-file").write_text("not a folder\n")
    (tmp / "empty").mkdir()
    (tmp / "no-sources").mkdir()
    (tmp / "landing-flat").mkdir()
    (tmp / "landing-flat" / "users.json").write_text('{"op": "c"}\n')  # not under a <table>/ folder
    views = {
        "not-utf8": {"bad.sql": b"select \xff from users"},
        "bad-sql": {"bad.sql": b"-- @key: email\nSELEC email FROM users\n"},
        "unknown-table": {"bad.sql": b"-- @key: email\nSELECT email FROM nosuchtable\n"},
        "refused": {"bad.sql": b"-- @key: n\nSELECT count(*) AS n FROM users\n"},
        "no-key": {"bad.sql": b"SELECT email FROM users\n"},
        "empty-file": {"bad.sql": b""},
        "twice": {"user_profile.sql": b"-- @key: email\nSELECT email FROM users\n"},
        "key-not-output": {"bad.sql": b"-- @key: nope\nSELECT email FROM users\n"},
        "bad-name": {"my-view.sql": b"-- @key: email\nSELECT email FROM users\n"},
        "bad-sink": {"bad.sql": b"-- @key: email\n-- @sink: ftp\nSELECT email FROM users\n"},
        "unknown-column": {"bad.sql": b"-- @key: email\nSELECT u.email, u.nope FROM users u\n"},
    }
    sources = {
        "malformed": b'name = "issues"\nprimary_key = ["id"\ncolumns = [\n',
        "not-utf8": b'name = "issues"\n# \xff\xfe\nprimary_key = ["id"]\ncolumns = [{ name = "id", type = "bigint" }]\n',
        "bad-type": b'name = "issues"\nprimary_key = ["id"]\ncolumns = [{ name = "id", type = "bigints" }]\n',
        "key-undeclared": b'name = "issues"\nprimary_key = ["nope"]\ncolumns = [{ name = "id", type = "bigint" }]\n',
        "empty-file": b"",
        "bad-name": b'name = "Bad Name"\nprimary_key = ["id"]\ncolumns = [{ name = "id", type = "bigint" }]\n',
        "column-twice": b'name = "issues"\nprimary_key = ["id"]\n'
        b'columns = [{ name = "id", type = "bigint" }, { name = "id", type = "string" }]\n',
    }
    for folder, files in views.items():
        (tmp / "views" / folder).mkdir(parents=True)
        for name, content in files.items():
            (tmp / "views" / folder / name).write_bytes(content)
    for folder, content in sources.items():
        (tmp / "sources" / folder).mkdir(parents=True)
        (tmp / "sources" / folder / "issues.toml").write_bytes(content)


def _environment(own: Mapping[str, str]) -> dict[str, str]:
    """The test's environment without any lakemv setting or Prefect API, plus the case's variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEMV_") and k != "PREFECT_API_URL"}
    return {**env, **own}


def _run(cli: ForkedCli, tmp: Path, env: Mapping[str, str], args: Sequence[str]) -> tuple[list[str], dict[str, str], subprocess.CompletedProcess[str]]:
    """Run `lakemv` in `tmp` ({tmp} and {sources} filled in); in a warehouse of its own under `tmp`
    unless the case gives one."""
    fill = {"{tmp}": str(tmp), "{sources}": SOURCES}

    def filled(text: str) -> str:
        for placeholder, value in fill.items():
            text = text.replace(placeholder, value)
        return text

    args = [filled(a) for a in args]
    env = {k: filled(v) for k, v in env.items()}
    if "--warehouse" not in args and "LAKEMV_WAREHOUSE" not in env:
        args = ["--warehouse", str(tmp / "wh"), *args]
    done = cli.run(args, _environment(env), tmp)
    return args, env, done


def _shown(args: Sequence[str], env: Mapping[str, str], done: subprocess.CompletedProcess[str]) -> str:
    settings = " ".join(f"{k}={v!r}" for k, v in env.items())
    return f"{settings} lakemv {' '.join(args)}\nexit {done.returncode}\nstderr:\n{done.stderr[:1500]}\nstdout:\n{done.stdout[:500]}"


def mistake(id: str, args: list[str], fragment: str | tuple[str, ...], env: dict[str, str] | None = None,  # noqa: A002
            absent: tuple[str, ...] = (), warnings: bool = False):  # fmt: skip
    """One row: `args` (and `env`) make the mistake; the error line must contain `fragment` (each of
    them); `absent` must appear nowhere in the output (a credential); `warnings`: the case is about a
    warning, so `warning:` lines besides the error line are expected."""
    fragments = (fragment,) if isinstance(fragment, str) else fragment
    return pytest.param(args, env or {}, fragments, absent, warnings, id=id)


MISTAKES = [
    # -- the command line itself: click's usage errors (exit 2) -------------------------------------
    mistake("no-command", [], "Missing command"),
    mistake("unknown-command", ["frobnicate"], "No such command 'frobnicate'"),
    mistake("unknown-global-option", ["--verbose", "status"], "No such option: --verbose"),
    mistake("warehouse-without-value", ["--warehouse"], "Option '--warehouse' requires an argument"),
    mistake("unknown-option", ["status", "--bogus"], "No such option: --bogus"),
    mistake("option-typo", ["ingest", "--landing", "{tmp}/empty", "--onse"], ("No such option: --onse", "--once")),
    mistake("status-format-nope", ["status", "--format", "nope"], "'nope' is not one of 'table', 'json', 'csv'"),
    mistake("query-format-uppercase", ["query", "select 1", "--format", "JSON"], "'JSON' is not one of"),
    mistake("query-format-without-value", ["query", "select 1", "-f"], "Option '-f' requires an argument"),
    mistake("query-without-sql", ["query"], "Missing argument 'sql'"),
    mistake("query-sql-unquoted", ["query", "select", "1"], "Got unexpected extra argument(s) (1)"),
    mistake("explain-without-view", ["explain"], "Missing argument 'view'"),
    mistake("explain-two-views", ["explain", "user_profile", "repo_summary"], "unexpected extra argument(s) (repo_summary)"),
    mistake("explain-sql-with-value", ["explain", "user_profile", "--sql=yes"], "Option '--sql' does not take a value"),
    mistake("backfill-without-view", ["backfill"], "Missing argument 'view'"),
    mistake("verify-sample-negative", ["verify", "user_profile", "--sample", "-1"], "Invalid value for '--sample'"),
    mistake("generate-without-out", ["generate", "--users", "3"], "Missing option '--out'"),
    mistake("generate-without-users", ["generate", "--out", "{tmp}/gen"], "Missing option '--users'"),
    mistake("generate-users-zero", ["generate", "--out", "{tmp}/gen", "--users", "0"], "Invalid value for '--users'"),
    mistake("generate-users-text", ["generate", "--out", "{tmp}/gen", "--users", "many"], "valid integer"),
    mistake("generate-rounds-zero", ["generate", "--out", "{tmp}/gen", "--users", "3", "--rounds", "0"], "Invalid value for '--rounds'"),
    mistake("events-late-share-above-one", ["generate-events", "--out", "{tmp}/ev", "--late-share", "1.5"],
            "Invalid value for '--late-share'"),  # fmt: skip
    mistake("ingest-landing-without-value", ["ingest", "--landing"], "Option '--landing' requires an argument"),
    mistake("ingest-trigger-zero", ["ingest", "--landing", "{tmp}/empty", "--trigger-seconds", "0"], "Invalid value for '--trigger-seconds'"),
    mistake("ingest-max-files-zero", ["ingest", "--landing", "{tmp}/empty", "--max-files-per-trigger", "0"],
            "Invalid value for '--max-files-per-trigger'"),  # fmt: skip
    mistake("serve-ingest-every-zero", ["serve", "--landing", "{tmp}/empty", "--ingest-every", "0"], "Invalid value for '--ingest-every'"),
    mistake("serve-port-text", ["serve", "--landing", "{tmp}/empty", "--port", "http"], "Invalid value for '--port'"),
    mistake("compact-retention-zero", ["compact", "--retention-hours", "0"], "Invalid value for '--retention-hours'"),
    mistake("demo-users-zero", ["demo", "--users", "0"], "Invalid value for '--users'"),
    mistake("stack-without-subcommand", ["stack"], "Missing command"),
    mistake("stack-unknown-subcommand", ["stack", "frob"], "No such command 'frob'"),
    mistake("stack-up-unknown-flag", ["stack", "up", "--bogus"], "No such option: --bogus"),
    mistake("stack-generate-users-zero", ["stack", "generate", "--users", "0"], "Invalid value for '--users'"),
    mistake("cluster-unknown-subcommand", ["cluster", "frob"], "No such command 'frob'"),
    mistake("cluster-up-workers-zero", ["cluster", "up", "--workers", "0"], "Invalid value for '--workers'"),
    # -- where to ingest from -------------------------------------------------------------------------
    mistake("ingest-neither-source", ["ingest", "--once"], "nothing to ingest from: give --landing DIR or --kafka HOST:PORT"),
    mistake("ingest-both-sources", ["ingest", "--landing", "{tmp}/empty", "--kafka", "localhost:9092"], "not both"),
    mistake("serve-neither-source", ["serve"], "nothing to ingest from"),
    mistake("serve-both-sources", ["serve", "--landing", "{tmp}/empty", "--kafka", "localhost:9092"], "not both"),
    mistake("kafka-without-port", ["ingest", "--kafka", "localhost"], "expected HOST:PORT"),
    mistake("kafka-as-url", ["ingest", "--kafka", "http://localhost:9092"], "expected HOST:PORT"),
    mistake("kafka-bootstrap-setting-malformed", ["ingest", "--once"], ("LAKEMV_KAFKA_BOOTSTRAP", "expected HOST:PORT"),
            env={"LAKEMV_KAFKA_BOOTSTRAP": "garbage"}),  # fmt: skip
    mistake("events-neither-target", ["generate-events"], "give either --out DIR or --kafka HOST:PORT"),
    mistake("events-both-targets", ["generate-events", "--out", "{tmp}/ev", "--kafka", "h:1"], "give either --out DIR or --kafka"),
    mistake("events-kafka-malformed", ["generate-events", "--kafka", "nope"], "expected HOST:PORT"),
    mistake("landing-missing", ["ingest", "--landing", "{tmp}/no-such-dir", "--once"], "landing directory does not exist"),
    mistake("landing-is-a-file", ["ingest", "--landing", "{tmp}/a-file", "--once"], "the landing path is a file"),
    mistake("landing-empty-once", ["ingest", "--landing", "{tmp}/empty", "--once"], "the landing directory holds no files"),
    mistake("landing-files-not-in-table-folders", ["ingest", "--landing", "{tmp}/landing-flat", "--once"], "<landing>/<table>/"),
    mistake("landing-path-with-markup", ["ingest", "--landing", "{tmp}/no[/x]such", "--once"],
            ("no[/x]such", "landing directory does not exist")),  # fmt: skip
    # -- output folders -------------------------------------------------------------------------------
    mistake("generate-out-is-a-file", ["generate", "--out", "{tmp}/a-file", "--users", "3"], "cannot create the output folder"),
    mistake("generate-out-under-a-file", ["generate", "--out", "{tmp}/a-file/sub", "--users", "3"], "cannot create the output folder"),
    mistake("events-out-is-a-file", ["generate-events", "--out", "{tmp}/a-file", "--events", "5"], "cannot create the output folder"),
    # -- query ----------------------------------------------------------------------------------------
    mistake("query-empty", ["query", ""], "the query is empty"),
    mistake("query-bad-sql", ["query", "selec 1"], "syntax error"),
    mistake("query-unknown-table", ["query", "select * from nope"], "Table with name nope does not exist"),
    mistake("query-view-before-ingest", ["query", "select * from user_profile"], ("user_profile", "run lakemv ingest")),
    mistake("query-missing-file", ["query", "select * from 'no-such.csv'"], "No files found"),
    mistake("query-table-name-with-markup", ["query", 'select * from "[/x]"'], "Table with name [/x] does not exist"),
    # -- views, tables, stacks by name ----------------------------------------------------------------
    mistake("explain-unknown-view", ["explain", "nope"], "no view named 'nope'"),
    mistake("explain-view-name-with-markup", ["explain", "[bold]x[/]"], "no view named '[bold]x[/]'"),
    mistake("verify-unknown-view", ["verify", "nope"], "no view named 'nope'"),
    mistake("backfill-unknown-view", ["backfill", "nope"], "no view named 'nope'"),
    mistake("compact-unknown-table", ["compact", "nope.table"], "no table nope.table"),
    mistake("stack-status-without-stack", ["stack", "status", "--dir", "{tmp}/no-stack"], "no stack in"),
    mistake("stack-env-without-stack", ["stack", "env", "--dir", "{tmp}/no-stack"], "no stack in"),
    mistake("stack-generate-without-stack", ["stack", "generate", "--dir", "{tmp}/no-stack", "--users", "3"], "no stack in"),
    mistake("cluster-worker-memory-garbage", ["cluster", "up", "--dir", "{tmp}/no-cluster", "--worker-memory", "lots"], "--worker-memory"),
    mistake("cluster-status-without-cluster", ["cluster", "status", "--dir", "{tmp}/no-cluster"], "no cluster in"),
    mistake("cluster-env-without-cluster", ["cluster", "env", "--dir", "{tmp}/no-cluster"], "no cluster in"),
    # -- settings -------------------------------------------------------------------------------------
    mistake("shuffle-partitions-zero", ["status"], ("LAKEMV_SHUFFLE_PARTITIONS", "greater than or equal to 1"),
            env={"LAKEMV_SHUFFLE_PARTITIONS": "0"}),  # fmt: skip
    mistake("shuffle-partitions-text", ["status"], ("LAKEMV_SHUFFLE_PARTITIONS", "valid integer"), env={"LAKEMV_SHUFFLE_PARTITIONS": "abc"}),
    mistake("spark-master-garbage", ["views"], "LAKEMV_SPARK_MASTER", env={"LAKEMV_SPARK_MASTER": "garbage"}),
    mistake("driver-memory-garbage", ["views"], "LAKEMV_DRIVER_MEMORY", env={"LAKEMV_DRIVER_MEMORY": "lots"}),
    mistake("catalog-name-bad", ["status"], "LAKEMV_CATALOG_NAME", env={"LAKEMV_CATALOG_NAME": "Bad-Name"}),
    mistake("catalog-uri-mysql", ["status"], "catalog URI scheme 'mysql' is not supported", env={"LAKEMV_CATALOG_URI": "mysql://x"}),
    mistake("catalog-uri-port-text", ["status"], ("LAKEMV_CATALOG_URI", "abc"), absent=("pw@",),
            env={"LAKEMV_CATALOG_URI": "postgresql://u:pw@localhost:abc/db"}),  # fmt: skip
    mistake("catalog-uri-port-out-of-range", ["query", "select 1"], ("LAKEMV_CATALOG_URI", "Port out of range"), absent=("pw@",),
            env={"LAKEMV_CATALOG_URI": "postgresql://u:pw@localhost:99999/db"}),  # fmt: skip
    mistake("catalog-uri-not-a-uri", ["status"], "cannot parse catalog URI", env={"LAKEMV_CATALOG_URI": "not a uri"}),
    mistake("catalog-database-down", ["status"], "cannot open the Iceberg catalog database", absent=("s3cretpw",),
            env={"LAKEMV_CATALOG_URI": "postgresql://lake:s3cretpw@127.0.0.1:1/lake"}),  # fmt: skip
    mistake("catalog-rest-down", ["query", "select 1"], ("cannot reach the REST catalog at http://127.0.0.1:1: connection refused",), env={"LAKEMV_CATALOG_URI": "http://127.0.0.1:1"}),
    mistake("kafka-options-malformed", ["status"], ("LAKEMV_KAFKA_OPTIONS", "JSON"), absent=("hunter2",),
            env={"LAKEMV_KAFKA_OPTIONS": '{"sasl.jaas.config": "password=hunter2", bad'}),  # fmt: skip
    mistake("kafka-options-a-list", ["status"], ("LAKEMV_KAFKA_OPTIONS", "JSON object"), env={"LAKEMV_KAFKA_OPTIONS": "[1, 2]"}),
    mistake("sinks-kind-a-number", ["status"], ("LAKEMV_SINKS", "expected a list of sink kinds"), env={"LAKEMV_SINKS": '{"user_profile": 5}'}),
    mistake("sinks-not-json", ["status"], ("LAKEMV_SINKS", "not a JSON object"), env={"LAKEMV_SINKS": "not json"}),
    mistake("sinks-unknown-kind", ["status"], ("LAKEMV_SINKS", "unknown sink 'ftp'"), env={"LAKEMV_SINKS": '{"user_profile": ["ftp"]}'}),
    mistake("sinks-unknown-view", ["status"], ("LAKEMV_SINKS", "unknown view 'nope'"), env={"LAKEMV_SINKS": '{"nope": ["delta"]}'}),
    mistake("sinks-a-list", ["status"], ("LAKEMV_SINKS", "JSON object"), env={"LAKEMV_SINKS": '["delta"]'}),
    mistake("warehouse-ftp", ["status"], ("LAKEMV_WAREHOUSE", "unsupported warehouse scheme 'ftp'"), env={"LAKEMV_WAREHOUSE": "ftp://x"}),
    mistake("warehouse-s3-without-bucket", ["status"], "names its bucket", env={"LAKEMV_WAREHOUSE": "s3://"}),
    mistake("warehouse-option-ftp", ["--warehouse", "ftp://x", "query", "select 1"], "unsupported warehouse scheme 'ftp'"),
    mistake("warehouse-option-empty", ["--warehouse", "", "status"], "--warehouse"),
    mistake("warehouse-is-a-file", ["--warehouse", "{tmp}/a-file", "status"], "cannot create the warehouse folder"),
    mistake("warehouse-with-markup", ["--warehouse", "{tmp}/a-file/[/x]wh", "query", "select 1"],
            ("[/x]wh", "cannot create the warehouse folder")),  # fmt: skip
    mistake("local-dir-is-a-file", ["status"], "LAKEMV_LOCAL_DIR", env={"LAKEMV_LOCAL_DIR": "{tmp}/a-file"}),
    mistake("s3-endpoint-not-a-url", ["--warehouse", "s3://bucket/lake", "status"], "LAKEMV_S3_ENDPOINT",
            env={"LAKEMV_S3_ENDPOINT": "not a url", "LAKEMV_LOCAL_DIR": "{tmp}/local"}),  # fmt: skip
    mistake("max-line-chars-negative", ["status"], ("LAKEMV_MAX_LINE_CHARS", "greater than or equal to 1024"), env={"LAKEMV_MAX_LINE_CHARS": "-1"}),
    mistake("kafka-topic-prefix-bad", ["status"], "LAKEMV_KAFKA_TOPIC_PREFIX", env={"LAKEMV_KAFKA_TOPIC_PREFIX": "bad prefix!"}),
    mistake("kafka-transactions-unknown", ["status"], ("LAKEMV_KAFKA_TRANSACTIONS", "'auto' or 'off'"),
            env={"LAKEMV_KAFKA_TRANSACTIONS": "sometimes"}),  # fmt: skip
    mistake("local-state-not-boolean", ["status"], ("LAKEMV_LOCAL_STATE", "valid boolean"), env={"LAKEMV_LOCAL_STATE": "maybe"}),
    mistake("view-workers-zero", ["status"], "LAKEMV_VIEW_WORKERS", env={"LAKEMV_VIEW_WORKERS": "0"}),
    mistake("jars-missing", ["views"], "jars are missing", env={"LAKEMV_JARS_DIR": "{tmp}/no-jars"}),
    mistake("sources-dirs-missing", ["status"], "sources folder does not exist", env={"LAKEMV_SOURCES_DIRS": "{tmp}/no-such-folder"}),
    mistake("sources-dirs-bad-json", ["status"], ("LAKEMV_SOURCES_DIRS", "not a JSON list"), env={"LAKEMV_SOURCES_DIRS": '["/a",'}),
    mistake("sources-dirs-a-file", ["status"], "is a file", env={"LAKEMV_SOURCES_DIRS": "{sources}/users.toml"}),
    mistake("sources-dirs-no-declarations", ["status"], "{tmp}/no-sources", env={"LAKEMV_SOURCES_DIRS": "{tmp}/no-sources"}),
    mistake("sources-dirs-twice", ["status"], "declared twice", env={"LAKEMV_SOURCES_DIRS": "{sources},{sources}"}),
    mistake("views-dir-missing", ["views"], "views folder does not exist", env={"LAKEMV_VIEWS_DIR": "{tmp}/no-such-folder"}),
    mistake("views-dir-a-file", ["explain", "user_profile"], "is a file", env={"LAKEMV_VIEWS_DIR": "{tmp}/a-file"}),
    mistake("extra-views-dir-missing", ["explain", "user_profile"], "views folder does not exist",
            env={"LAKEMV_EXTRA_VIEWS_DIR": "{tmp}/no-such-folder"}),  # fmt: skip
    # -- view definitions (LAKEMV_EXTRA_VIEWS_DIR) ----------------------------------------------------
    mistake("view-not-utf8", ["views"], ("bad.sql", "not UTF-8"), env={"LAKEMV_EXTRA_VIEWS_DIR": "{tmp}/views/not-utf8"}),
    mistake("view-invalid-sql", ["views"], ("view bad", "SQL does not parse"), env={"LAKEMV_EXTRA_VIEWS_DIR": "{tmp}/views/bad-sql"}),
    mistake("view-unknown-table", ["views"], "reads 'nosuchtable', which is not a declared source",
            env={"LAKEMV_EXTRA_VIEWS_DIR": "{tmp}/views/unknown-table"}),  # fmt: skip
    mistake("view-unknown-table-status", ["status"], "not a declared source", env={"LAKEMV_EXTRA_VIEWS_DIR": "{tmp}/views/unknown-table"}),
    mistake("view-refused-by-planner", ["views"], "an aggregate with no GROUP BY", env={"LAKEMV_EXTRA_VIEWS_DIR": "{tmp}/views/refused"}),
    mistake("view-refused-backfill", ["backfill", "bad"], "an aggregate with no GROUP BY", env={"LAKEMV_EXTRA_VIEWS_DIR": "{tmp}/views/refused"}),
    mistake("view-without-key", ["views"], ("view bad", "no key"), env={"LAKEMV_EXTRA_VIEWS_DIR": "{tmp}/views/no-key"}),
    mistake("view-empty-file", ["views"], ("bad", "empty"), env={"LAKEMV_EXTRA_VIEWS_DIR": "{tmp}/views/empty-file"}),
    mistake("view-defined-twice", ["views"], "'user_profile' is defined twice", env={"LAKEMV_EXTRA_VIEWS_DIR": "{tmp}/views/twice"}),
    mistake("view-key-not-output", ["explain", "bad"], "key column 'nope' is not an output column",
            env={"LAKEMV_EXTRA_VIEWS_DIR": "{tmp}/views/key-not-output"}),  # fmt: skip
    mistake("view-file-name-bad", ["views"], "my-view", env={"LAKEMV_EXTRA_VIEWS_DIR": "{tmp}/views/bad-name"}),
    mistake("view-unknown-sink", ["views"], "unknown sink 'ftp'", env={"LAKEMV_EXTRA_VIEWS_DIR": "{tmp}/views/bad-sink"}),
    mistake("view-unknown-column", ["explain", "bad"], "Unknown column: nope", env={"LAKEMV_EXTRA_VIEWS_DIR": "{tmp}/views/unknown-column"}),
    # -- source declarations (LAKEMV_SOURCES_DIRS) ----------------------------------------------------
    mistake("source-malformed-toml", ["status"], ("issues.toml", "invalid TOML"), env={"LAKEMV_SOURCES_DIRS": "{sources},{tmp}/sources/malformed"}),
    mistake("source-not-utf8", ["status"], ("issues.toml", "not UTF-8"), env={"LAKEMV_SOURCES_DIRS": "{sources},{tmp}/sources/not-utf8"}),
    mistake("source-bad-column-type", ["status"], ("issues.toml", "columns.0.type"), env={"LAKEMV_SOURCES_DIRS": "{sources},{tmp}/sources/bad-type"}),
    mistake("source-key-undeclared", ["status"], "primary key column(s) not declared: nope",
            env={"LAKEMV_SOURCES_DIRS": "{sources},{tmp}/sources/key-undeclared"}),  # fmt: skip
    mistake("source-empty-file", ["status"], ("issues.toml", "the file is empty"), env={"LAKEMV_SOURCES_DIRS": "{sources},{tmp}/sources/empty-file"}),
    mistake("source-bad-name", ["query", "select 1"], ("issues.toml", "name"), env={"LAKEMV_SOURCES_DIRS": "{sources},{tmp}/sources/bad-name"}),
    mistake("source-column-twice", ["status"], "duplicate columns: id", env={"LAKEMV_SOURCES_DIRS": "{sources},{tmp}/sources/column-twice"}),
    # -- a mistake while a warning is printed too -----------------------------------------------------
    mistake("typo-variable-and-bad-query", ["query", "selec 1"], "syntax error", env={"LAKEMV_WAREHOSE": "x"}, warnings=True),
]


@pytest.mark.parametrize(("args", "env", "fragments", "absent", "warnings"), MISTAKES)
def test_a_mistake_is_one_clear_error_line(forked_cli: ForkedCli, tmp_path: Path, args, env, fragments, absent, warnings) -> None:
    _lay_out(tmp_path)
    args, env, done = _run(forked_cli, tmp_path, env, args)
    shown = _shown(args, env, done)
    fragments = [f.replace("{tmp}", str(tmp_path)) for f in fragments]
    assert done.returncode in (1, 2), shown
    assert "Traceback" not in done.stdout, shown
    for never in NEVER:
        assert never not in done.stderr, shown
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    if warnings:
        assert any(line.startswith("warning:") for line in lines), shown
        lines = [line for line in lines if not line.startswith("warning:")]
    assert len(lines) == 1, shown
    assert lines[0].startswith("error:"), shown
    for fragment in fragments:
        assert fragment in lines[0], f"expected {fragment!r} in the error line\n{shown}"
    for secret in absent:
        assert secret not in done.stderr and secret not in done.stdout, shown


WARNINGS = [
    pytest.param({"LAKEMV_WAREHOSE": "x"}, ["status"],
                 ["warning: LAKEMV_WAREHOSE is not a lakemv setting (did you mean LAKEMV_WAREHOUSE? "], (), id="warehouse-typo"),  # fmt: skip
    pytest.param({"LAKEMV_SHUFFLE_PARTITION": "2"}, ["query", "select 1"],
                 ["warning: LAKEMV_SHUFFLE_PARTITION is not a lakemv setting (did you mean LAKEMV_SHUFFLE_PARTITIONS? "], (),
                 id="shuffle-partitions-typo"),  # fmt: skip
    pytest.param({"LAKEMV_EXTRA_VIEW_DIR": "{tmp}/views/refused"}, ["status"],
                 ["warning: LAKEMV_EXTRA_VIEW_DIR is not a lakemv setting (did you mean LAKEMV_EXTRA_VIEWS_DIR? "], (),
                 id="extra-views-dir-typo"),  # fmt: skip
    pytest.param({"LAKEMV_S3_SECRET_KEY": "hunter2"}, ["query", "select 1"],
                 ["warning: LAKEMV_S3_SECRET_KEY is not a lakemv setting (did you mean LAKEMV_S3_SECRET_ACCESS_KEY? "], ("hunter2",),
                 id="secret-typo-not-echoed"),  # fmt: skip
    pytest.param({"LAKEMV_WAREHOSE": "x", "LAKEMV_SPARK_MSTER": "local[1]"}, ["status", "--format", "json"],
                 ["warning: LAKEMV_SPARK_MSTER is not a lakemv setting (did you mean LAKEMV_SPARK_MASTER? ",
                  "warning: LAKEMV_WAREHOSE is not a lakemv setting (did you mean LAKEMV_WAREHOUSE? "], (), id="two-typos"),  # fmt: skip
    pytest.param({"LAKEMV_DEBUG": "1"}, ["query", "select 1"], [], (), id="debug-is-no-typo"),
    pytest.param({}, ["--warehouse", "{tmp}/wh[/x]", "status"], [], (), id="warehouse-path-with-markup"),
]


@pytest.mark.parametrize(("env", "args", "expected", "absent"), WARNINGS)
def test_a_warning_names_the_setting_and_the_command_still_works(forked_cli: ForkedCli, tmp_path: Path, env, args, expected, absent) -> None:
    _lay_out(tmp_path)
    args, env, done = _run(forked_cli, tmp_path, env, args)
    shown = _shown(args, env, done)
    assert done.returncode == 0, shown
    assert done.stdout.strip(), shown
    for never in NEVER:
        assert never not in done.stderr, shown
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == len(expected), shown
    for line, warning in zip(lines, expected, strict=True):
        assert line.startswith(warning), f"expected a line starting {warning!r}\n{shown}"
    for secret in absent:
        assert secret not in done.stderr and secret not in done.stdout, shown
