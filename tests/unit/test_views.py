"""View definitions are data: a SQL file with a key header; mistakes are clear and name the view."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lakemv.catalog.settings import LakeSettings
from lakemv.core.errors import ConfigError, ViewDefinitionError
from lakemv.core.planner.definitions import load_views, parse_view


def test_the_two_seed_views_load_from_the_views_folder():
    views = load_views(LakeSettings().view_dirs)
    assert set(views) == {"user_profile", "repo_summary"}
    assert views["user_profile"].key == ("email",)
    assert views["repo_summary"].key == ("owner", "name")
    assert views["user_profile"].description and views["user_profile"].location.endswith("user_profile.sql")
    assert "@key" not in views["user_profile"].sql  # directives are header data, not SQL


def test_an_extra_folder_adds_views_and_a_duplicate_name_is_refused(tmp_path: Path):
    (tmp_path / "stars_per_user.sql").write_text("-- @key: username\nSELECT username, count(*) AS n FROM stars GROUP BY username\n")
    settings = LakeSettings(extra_views_dir=tmp_path)
    assert set(load_views(settings.view_dirs)) == {"user_profile", "repo_summary", "stars_per_user"}
    (tmp_path / "user_profile.sql").write_text("-- @key: email\nSELECT email FROM users\n")
    with pytest.raises(ConfigError, match="'user_profile' is defined twice"):
        load_views(settings.view_dirs)


def test_key_header_takes_several_columns_and_ordinary_comments_are_kept():
    view = parse_view("-- note: this is a comment\n-- @key: owner , name\nSELECT owner, name FROM repos -- trailing\n;", "r")
    assert view.key == ("owner", "name")
    assert parse_view("-- @key: Email\nSELECT email FROM users", "v").key == ("email",)  # SQL names are case-blind
    assert view.sql.startswith("-- note: this is a comment")
    assert not view.sql.endswith(";")


def test_fingerprint_ignores_formatting_but_not_meaning():
    a = parse_view("-- @key: email\nSELECT email FROM users", "v")
    b = parse_view("-- @key: email\nselect   email\nfrom users", "v")
    c = parse_view("-- @key: email\nSELECT email FROM users WHERE id > 1", "v")
    assert a.fingerprint == b.fingerprint != c.fingerprint


@pytest.mark.parametrize(
    ("text", "name", "message"),
    [
        ("SELECT email FROM users", "v", "no key: add a header line such as `-- @key: email`"),
        ("-- @key: email\n-- @owner: me\nSELECT email FROM users", "v", "unknown directive @owner"),
        ("-- @key: email\n-- @key: id\nSELECT email FROM users", "v", "@key is given twice"),
        ("-- @key: email\nSELECT email FROM users; SELECT 1", "v", "exactly one SELECT statement, found 2"),
        ("-- @key: email\nSELEC email FROM users", "v", "SQL does not parse"),
        ("-- @key: email\nDELETE FROM users", "v", "the body must be a SELECT query"),
        ("-- @key: e-mail\nSELECT email FROM users", "v", "not a lower-case identifier"),
        ("-- @key: email\nSELECT email FROM users", "Bad-Name", "string should match pattern"),
        ("-- @key: email\nSELECT email FROM users", "x__changes", "reserved for change feeds"),
    ],
)
def test_bad_definitions_are_refused_with_the_reason(text, name, message):
    with pytest.raises(ViewDefinitionError, match="(?i)" + re.escape(message)) as info:
        parse_view(text, name)
    assert str(info.value).startswith(f"view {name}")


def test_a_missing_views_folder_is_a_config_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="views folder does not exist"):
        load_views([tmp_path / "nope"])
