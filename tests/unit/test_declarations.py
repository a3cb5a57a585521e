"""Source declarations are data: the seed tables load; mistakes name the file and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakemv.catalog.declarations import load_sources, parse_source
from lakemv.core.errors import ConfigError

SEED = {
    "users": (["id", "email", "username", "registered_at"], ("email",)),
    "repos": (["name", "owner", "description", "star_count", "fork_count", "created_at", "updated_at"], ("owner", "name")),
    "pull_requests": (["title", "repo", "repo_owner", "index", "author", "status", "created_at"], ("repo", "repo_owner", "index")),
    "stars": (["username", "repo_name", "repo_owner", "created_at"], ("username", "repo_name", "repo_owner")),
    "payment_info": (["id", "user_id", "verified"], ("id",)),
}


def test_the_five_seed_tables_are_declared(sources):
    assert set(sources) == set(SEED)
    for name, (columns, key) in SEED.items():
        assert list(sources[name].column_names) == columns
        assert sources[name].primary_key == key
        assert sources[name].ordering == ("source.lsn", "source.ts_ms")
    assert sources["users"].column("registered_at").spark_type == "TIMESTAMP"
    assert sources["users"].unique == (("username",),)  # GitHub keeps usernames unique


def test_onboarding_a_source_is_a_file(tmp_path: Path):
    (tmp_path / "issues.toml").write_text(
        'name = "issues"\nprimary_key = ["id"]\nordering = ["source.ts_ms"]\n'
        'columns = [{ name = "id", type = "bigint" }, { name = "opened", type = "date" }]\n'
    )
    registry = load_sources([tmp_path])
    assert registry["issues"].column("opened").wire_encoding == "days"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('name = "t"\nprimary_key = ["x"]\ncolumns = [{ name = "id", type = "bigint" }]', "primary key column(s) not declared: x"),
        ('name = "t"\nprimary_key = ["id"]\ncolumns = [{ name = "id", type = "uuid" }]', "columns.0.type"),
        ('name = "t"\nprimary_key = ["id"]\ncolumns = [{ name = "_lmv_x", type = "bigint" }]', "columns.0.name: String should match pattern"),
        ('name = "t"\nprimary_key = ["id"]\ncolumns = [{ name = "id", type = "bigint", encoding = "millis" }]', "does not apply"),
        ('name = "t"\nprimary_key = ["id"]\ncolumns = [{ name = "id", type = "bigint" }, { name = "id", type = "string" }]', "duplicate columns: id"),
        ('name = "t"\nprimary_key = ["id"]\nordering = ["after.id"]\ncolumns = [{ name = "id", type = "bigint" }]', "ordering field"),
        ('name = "t"\nprimary_key = ["id"]\nunique = [["nick"]]\ncolumns = [{ name = "id", type = "bigint" }]', "unique key column(s) not declared: nick"),
        ('name = "t"\nprimary_key = ["id"]\nunique = [[]]\ncolumns = [{ name = "id", type = "bigint" }]', "a unique key needs at least one column"),
        ('name = "t"\nprimary_key = ["id"]\nunique = [["id", "id"]]\ncolumns = [{ name = "id", type = "bigint" }]', "lists a column twice"),
        ('name = "t"\nprimary_key = [\n', "invalid TOML"),
    ],
)
def test_bad_declarations_say_where_and_why(text, message):
    with pytest.raises(ConfigError) as info:
        parse_source(text, "sources/t.toml")
    assert str(info.value).startswith("sources/t.toml: ") and message in str(info.value)


def test_a_source_declared_twice_is_refused(tmp_path: Path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "t.toml").write_text('name = "t"\nprimary_key = ["id"]\ncolumns = [{ name = "id", type = "bigint" }]\n')
    with pytest.raises(ConfigError, match="declared twice"):
        load_sources([tmp_path / "a", tmp_path / "b"])


def test_missing_sources_folder(tmp_path: Path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_sources([tmp_path / "nope"])
