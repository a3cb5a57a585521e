"""A new `serve` server's Prefect database starts as a copy of a migrated empty one (lakemv.flows.prefectdb)."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import pytest

from lakemv.flows.prefectdb import CONFIGURED, DATABASE, seed


@pytest.fixture
def template(tmp_path):
    path = tmp_path / "prefect-template.db"
    with closing(sqlite3.connect(path)) as con:
        con.execute("PRAGMA journal_mode=WAL")  # as Prefect's: the copy must still hold every row
        con.execute("CREATE TABLE alembic_version (version_num TEXT)")
        con.execute("INSERT INTO alembic_version VALUES ('head')")
        con.commit()
    return path


def _version(path):
    with closing(sqlite3.connect(path)) as con:
        return con.execute("SELECT version_num FROM alembic_version").fetchone()[0]


def test_a_new_home_gets_a_copy_and_an_existing_database_is_left_alone(tmp_path, template, monkeypatch):
    for name in CONFIGURED:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "lake" / "_prefect"
    assert seed(home, template) and _version(home / DATABASE) == "head"
    assert not (home / f"{DATABASE}.partial").exists()
    with closing(sqlite3.connect(home / DATABASE)) as con:  # the lake's own runs from then on
        con.execute("UPDATE alembic_version SET version_num = 'mine'")
        con.commit()
    assert not seed(home, template) and _version(home / DATABASE) == "mine"


def test_no_copy_without_a_template_or_for_a_database_configured_elsewhere(tmp_path, template, monkeypatch):
    for name in CONFIGURED:
        monkeypatch.delenv(name, raising=False)
    assert not seed(tmp_path / "a", tmp_path / "missing.db") and not (tmp_path / "a" / DATABASE).exists()
    monkeypatch.setenv(CONFIGURED[0], "postgresql+asyncpg://prefect@db/prefect")
    assert not seed(tmp_path / "b", template) and not (tmp_path / "b" / DATABASE).exists()
