"""A PostgreSQL-backed Iceberg JDBC catalog works by settings alone (a real server on loopback,
password authentication): the password never reaches a command line, the output or a file lakemv writes."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest

from lakemv.core.runtime.ports import free_port
from lakemv.workload.github import GitHubWorkload, WorkloadConfig
from tests.e2e.cli import lakemv, model_rows, queried_rows
from tests.e2e.secrets import CommandLines, holding, prefect_holding


PASSWORD = "pg-catalog-s3cr3t-7f2e"


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    """Start PostgreSQL (Debian package, installed by setup) on a free loopback port."""
    binaries = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    assert binaries, "PostgreSQL server binaries missing: run `make setup`"
    bin_dir = Path(binaries[-1])
    data = Path(tempfile.mkdtemp(prefix="lakemv-pg-", dir="/tmp"))
    as_user: list[str] = []
    if os.geteuid() == 0:  # the server refuses to run as root
        shutil.chown(data, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    (data / "password").write_text(PASSWORD)
    if as_user:
        shutil.chown(data / "password", "postgres", "postgres")
    env = {**os.environ, "PGPASSWORD": PASSWORD}
    run = lambda *cmd: subprocess.run([*as_user, *cmd], check=True, capture_output=True, text=True, env=env)  # noqa: E731
    run(str(bin_dir / "initdb"), "-D", str(data / "db"), "-A", "scram-sha-256", f"--pwfile={data / 'password'}", "-U", "lake")
    run(str(bin_dir / "pg_ctl"), "-D", str(data / "db"), "-w", "-l", str(data / "log"),
        "-o", f"-p {port} -k {data} -c listen_addresses=127.0.0.1", "start")  # fmt: skip
    try:
        run(str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "lake", "iceberg")
        yield f"postgresql://lake:{PASSWORD}@127.0.0.1:{port}/iceberg"
    finally:
        run(str(bin_dir / "pg_ctl"), "-D", str(data / "db"), "-m", "immediate", "stop")
        shutil.rmtree(data, ignore_errors=True)


@pytest.mark.slow(65)
def test_ingest_and_query_through_a_postgresql_catalog(postgres, tmp_path, sources):
    env = {"LAKEMV_CATALOG_URI": postgres}
    landing, warehouse = tmp_path / "landing", tmp_path / "wh"
    lakemv("generate", "--out", str(landing), "--users", "150", "--seed", "9", "--rounds", "2", env=env)
    with CommandLines() as commands:
        ingested = lakemv("--warehouse", str(warehouse), "ingest", "--landing", str(landing), "--once", env=env)
    assert [c for c in commands.seen if "SparkSubmit" in c], "the sampler never saw the JVM"
    assert not [c for c in commands.seen if PASSWORD in c], "the catalog password is on a command line"
    assert PASSWORD not in ingested.stdout + ingested.stderr
    assert not holding(tmp_path, PASSWORD), "a file lakemv wrote holds the catalog password"
    assert not prefect_holding(PASSWORD), "the Prefect API holds the catalog password (an artifact or a flow run's parameters)"

    truth = GitHubWorkload(WorkloadConfig(users=150, seed=9, rounds=2), sources)
    for _ in truth.rounds():
        pass
    for name, source in truth.sources.items():
        assert queried_rows(warehouse, source, env=env) == model_rows(truth.live_rows(name), source), name

    with psycopg2.connect(postgres) as con, con.cursor() as cur:
        cur.execute("SELECT table_namespace, table_name FROM iceberg_tables WHERE catalog_name = 'lake'")
        registered = set(cur.fetchall())
    assert {("mirror", name) for name in sources} | {("lakemv", "dead_letters")} <= registered
    assert not (warehouse / "catalog.db").exists(), "no SQLite catalog when PostgreSQL is configured"
