"""One settings object wires Spark, pyiceberg and DuckDB to the same catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from catalog.errors import ConfigError
from catalog.lake import jdbc_properties, spark_catalog_conf
from catalog.settings import LakeSettings


def test_default_is_sqlite_under_the_warehouse(tmp_path: Path):
    settings = LakeSettings(warehouse=tmp_path / "wh")
    assert settings.catalog_url == f"sqlite:///{tmp_path / 'wh' / 'catalog.db'}"
    assert jdbc_properties(settings) == {"uri": f"jdbc:sqlite:{tmp_path / 'wh' / 'catalog.db'}"}
    conf = spark_catalog_conf(settings)
    assert conf["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.catalog.lake.warehouse"] == (tmp_path / "wh").as_uri()
    assert conf["spark.sql.catalog.lake.jdbc.init-catalog-tables"] == "false"


def test_postgresql_catalog_by_settings_alone(monkeypatch):
    monkeypatch.setenv("LAKEMV_CATALOG_URI", "postgresql://lake:s3cret@db.internal:6543/iceberg")
    monkeypatch.setenv("LAKEMV_CATALOG_NAME", "prod")
    settings = LakeSettings()
    assert settings.catalog_url == "postgresql+psycopg2://lake:s3cret@db.internal:6543/iceberg"
    conf = spark_catalog_conf(settings)
    assert conf["spark.sql.catalog.prod.uri"] == "jdbc:postgresql://db.internal:6543/iceberg"
    assert conf["spark.sql.catalog.prod.jdbc.user"] == "lake"
    assert conf["spark.sql.catalog.prod.jdbc.password"] == "s3cret"


def test_warehouse_from_environment_is_made_absolute(monkeypatch, tmp_path: Path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LAKEMV_WAREHOUSE", "lakehouse")
    assert LakeSettings().warehouse == tmp_path / "lakehouse"


@pytest.mark.parametrize("uri", ["mysql://x@y/z", "not a url"])
def test_unsupported_catalog_uri_is_a_config_error(uri):
    with pytest.raises(ConfigError, match="LAKEMV_CATALOG_URI"):
        LakeSettings(catalog_uri=uri).catalog_url


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("/a", ("/a",)),
        ("/a,/b", ("/a", "/b")),
        (" /a , /b ,", ("/a", "/b")),
        ('["/a", "/b"]', ("/a", "/b")),
    ],
)
def test_a_list_of_folders_is_what_a_user_types(monkeypatch, typed, expected):
    monkeypatch.setenv("LAKEMV_SOURCES_DIRS", typed)
    assert LakeSettings().sources_dirs == tuple(Path(p) for p in expected)


def test_a_setting_that_does_not_validate_names_the_variable_and_the_value(monkeypatch):
    from flows.lake import lake_settings

    monkeypatch.setenv("LAKEMV_SHUFFLE_PARTITIONS", "many")
    with pytest.raises(ConfigError, match=r"LAKEMV_SHUFFLE_PARTITIONS: .*integer.*'many'"):
        lake_settings()
    monkeypatch.setenv("LAKEMV_SHUFFLE_PARTITIONS", "2")
    monkeypatch.setenv("LAKEMV_SOURCES_DIRS", '["/a", ')
    with pytest.raises(ConfigError, match="LAKEMV_SOURCES_DIRS: .*JSON list"):
        lake_settings()
