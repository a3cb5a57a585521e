"""One settings object wires Spark, pyiceberg and DuckDB to the same catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakemv.catalog.lake import delta_rs_options, hadoop_s3_conf, jdbc_properties, spark_catalog_conf
from lakemv.catalog.settings import LakeSettings
from lakemv.core.errors import ConfigError


def test_default_is_sqlite_under_the_warehouse(tmp_path: Path):
    settings = LakeSettings(warehouse=tmp_path / "wh")
    assert settings.catalog_url == f"sqlite:///{tmp_path / 'wh' / 'catalog.db'}"
    assert jdbc_properties(settings) == {"uri": f"jdbc:sqlite:{tmp_path / 'wh' / 'catalog.db'}"}
    conf = spark_catalog_conf(settings)
    assert conf["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.catalog.lake.warehouse"] == (tmp_path / "wh").as_uri()
    assert conf["spark.sql.catalog.lake.jdbc.init-catalog-tables"] == "false"


def test_bootstrap_creates_the_catalog_tables_once_and_then_leaves_pyiceberg_out(tmp_path: Path, monkeypatch):
    """A fresh SQLite catalog gets Iceberg's JDBC tables from pyiceberg; a process that finds them
    there does not open pyiceberg at all (its import is ~1 s of a command's start)."""
    import sqlite3

    from lakemv.catalog import lake

    settings = LakeSettings(warehouse=tmp_path / "wh")
    lake.bootstrap(settings)
    with sqlite3.connect(tmp_path / "wh" / "catalog.db") as con:
        tables = {name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert con.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert set(lake.CATALOG_TABLES) <= tables, tables

    def refuse(_settings):  # noqa: ANN001, ANN202
        raise AssertionError("pyiceberg opened for a catalog that has its tables")

    monkeypatch.setattr(lake, "pyiceberg_catalog", refuse)
    lake.bootstrap(settings)
    with pytest.raises(AssertionError, match="pyiceberg opened"):
        lake.bootstrap(LakeSettings(warehouse=tmp_path / "another"))


def test_table_locations_are_read_off_a_sqlite_catalog_as_pyiceberg_loads_them(tmp_path: Path):
    """The tables of a namespace and their current metadata files, from the JDBC catalog's own table:
    what pyiceberg's catalog says, Iceberg views (a view's `__changes`) left out."""
    import sqlite3

    import pyarrow as pa

    from lakemv.catalog.lake import pyiceberg_catalog, table_locations

    settings = LakeSettings(warehouse=tmp_path / "wh")
    assert table_locations(settings, "views") == {}  # no catalog database yet
    catalog = pyiceberg_catalog(settings)
    assert table_locations(settings, "views") == {}  # its tables, but none in the namespace
    catalog.create_namespace("views")
    for name in ("user_profile", "repo_summary"):
        catalog.create_table(("views", name), schema=pa.schema([pa.field("id", pa.int64())]))
    with sqlite3.connect(tmp_path / "wh" / "catalog.db") as con:  # an Iceberg view, as Spark's JDBC catalog records one
        con.execute(
            "INSERT INTO iceberg_tables VALUES (?, 'views', 'user_profile__changes', 'file:/x/v.metadata.json', NULL, 'VIEW')",
            (settings.catalog_name,),
        )
    expected = {name: catalog.load_table(("views", name)).metadata_location for name in ("user_profile", "repo_summary")}
    assert table_locations(settings, "views") == expected
    assert table_locations(settings, "views", "repo_summary") == {"repo_summary": expected["repo_summary"]}  # one table only
    assert table_locations(settings, "views", "user_profile__changes") == {} and table_locations(settings, "views", "nope") == {}
    assert table_locations(settings.model_copy(update={"catalog_name": "other"}), "views") == {}


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
    assert LakeSettings().warehouse == str(tmp_path / "lakehouse")


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
    from lakemv.flows.context import lake_settings

    monkeypatch.setenv("LAKEMV_SHUFFLE_PARTITIONS", "many")
    with pytest.raises(ConfigError, match=r"LAKEMV_SHUFFLE_PARTITIONS: .*integer.*'many'"):
        lake_settings()
    monkeypatch.setenv("LAKEMV_SHUFFLE_PARTITIONS", "2")
    monkeypatch.setenv("LAKEMV_SOURCES_DIRS", '["/a", ')
    with pytest.raises(ConfigError, match="LAKEMV_SOURCES_DIRS: .*JSON list"):
        lake_settings()


def test_a_warehouse_in_an_object_store_by_settings_alone(monkeypatch, tmp_path: Path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LAKEMV_WAREHOUSE", "s3a://lake/warehouse/")
    monkeypatch.setenv("LAKEMV_S3_ENDPOINT", "http://127.0.0.1:9000")
    monkeypatch.setenv("LAKEMV_S3_ACCESS_KEY_ID", "lakemv")
    monkeypatch.setenv("LAKEMV_S3_SECRET_ACCESS_KEY", "s3cret")
    settings = LakeSettings()
    assert settings.warehouse == "s3://lake/warehouse" and settings.remote
    assert "s3cret" not in repr(settings)
    # lakemv's own durable files go to the bucket, through Hadoop's s3a for Spark's checkpoints
    assert settings.checkpoint_root.uri == "s3://lake/warehouse/_checkpoints"
    assert (settings.checkpoint_root / "ingest-1").hadoop == "s3a://lake/warehouse/_checkpoints/ingest-1"
    assert (settings.delta_root / "v").hadoop == "s3a://lake/warehouse/delta/v"
    # the driver's own files (the local state, caches, the catalog database) stay on its disk
    assert settings.local_root == tmp_path / ".lakemv"
    assert settings.catalog_url == f"sqlite:///{tmp_path / '.lakemv' / 'catalog.db'}"
    conf = spark_catalog_conf(settings)
    assert conf["spark.sql.catalog.lake.warehouse"] == "s3://lake/warehouse"
    assert conf["spark.sql.catalog.lake.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert conf["spark.sql.catalog.lake.s3.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.sql.catalog.lake.s3.path-style-access"] == "true"
    assert conf["spark.sql.catalog.lake.s3.secret-access-key"] == "s3cret"
    hadoop = hadoop_s3_conf(settings)
    assert hadoop["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert hadoop["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert hadoop["spark.hadoop.fs.s3a.secret.key"] == "s3cret"
    assert delta_rs_options(settings)["AWS_ALLOW_HTTP"] == "true"


def test_a_rest_catalog_by_settings_alone(monkeypatch):
    monkeypatch.setenv("LAKEMV_CATALOG_URI", "http://catalog:8181")
    monkeypatch.setenv("LAKEMV_WAREHOUSE", "s3://lake/warehouse")
    settings = LakeSettings()
    assert settings.is_rest and not settings.is_sqlite
    conf = spark_catalog_conf(settings)
    assert conf["spark.sql.catalog.lake.type"] == "rest"
    assert conf["spark.sql.catalog.lake.uri"] == "http://catalog:8181"
    assert "spark.sql.catalog.lake.catalog-impl" not in conf and "spark.sql.catalog.lake.jdbc.schema-version" not in conf
    with pytest.raises(ConfigError, match="REST catalog"):
        settings.catalog_url


@pytest.mark.parametrize(("warehouse", "message"), [("s3:///x", "names its bucket"), ("gs://b/x", "unsupported warehouse scheme")])
def test_a_warehouse_that_is_not_a_folder_or_an_s3_prefix_is_refused(monkeypatch, warehouse, message):
    from lakemv.flows.context import lake_settings

    monkeypatch.setenv("LAKEMV_WAREHOUSE", warehouse)
    with pytest.raises(ConfigError, match=f"LAKEMV_WAREHOUSE: .*{message}"):
        lake_settings()


def test_the_local_state_lives_on_the_drivers_disk(tmp_path: Path):
    from lakemv.catalog.streams import state_path

    local = LakeSettings(warehouse=tmp_path / "wh")
    checkpoint = local.checkpoint_root / "ingest-1"
    assert state_path(local, checkpoint) == tmp_path / "wh" / "_checkpoints" / "ingest-1" / "lakemv-state" / "state.sqlite"
    remote = LakeSettings(warehouse="s3://lake/wh", local_dir=tmp_path / "driver")
    assert state_path(remote, remote.checkpoint_root / "ingest-1") == tmp_path / "driver" / "state" / "ingest-1" / "state.sqlite"
