"""The Iceberg catalog `lake`, wired for Spark, pyiceberg and DuckDB from one LakeSettings.

Both engines talk to the same JDBC catalog database (SQLite by default, PostgreSQL by settings).
pyiceberg creates the catalog tables once; Spark then runs with `jdbc.init-catalog-tables=false`,
which avoids the SQLite read transaction a second JdbcCatalog instance would otherwise hold
(see PLATFORM-NOTES, "Locking trap").
"""

from __future__ import annotations

import os
import sqlite3
from functools import lru_cache

from pyiceberg.catalog.sql import SqlCatalog
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from catalog.errors import ConfigError
from catalog.settings import LakeSettings


def jdbc_properties(settings: LakeSettings) -> dict[str, str]:
    """JDBC URI and credentials for Iceberg's JdbcCatalog, derived from the SQLAlchemy URL."""
    url = make_url(settings.catalog_url)
    if url.get_backend_name() == "sqlite":
        return {"uri": f"jdbc:sqlite:{url.database}"}
    props = {"uri": f"jdbc:postgresql://{url.host or 'localhost'}:{url.port or 5432}/{url.database}"}
    if url.username:
        props["jdbc.user"] = url.username
    if url.password:
        props["jdbc.password"] = url.password
    return props


def spark_catalog_conf(settings: LakeSettings) -> dict[str, str]:
    """Spark conf entries that define the Iceberg catalog `settings.catalog_name`."""
    prefix = f"spark.sql.catalog.{settings.catalog_name}"
    conf = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
        f"{prefix}.warehouse": settings.warehouse_uri,
        f"{prefix}.jdbc.schema-version": "V1",
        f"{prefix}.jdbc.init-catalog-tables": "false",
        # Other processes (pyiceberg, DuckDB readers, maintenance) commit too: always reload metadata.
        f"{prefix}.cache-enabled": "false",
    }
    conf.update({f"{prefix}.{k}": v for k, v in jdbc_properties(settings).items()})
    return conf


def ensure_warehouse(settings: LakeSettings) -> None:
    """Create the warehouse folder, or say clearly why it cannot be used."""
    folder = settings.warehouse
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the warehouse folder: {exc.strerror}", str(folder)) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError("the warehouse folder is not writable", str(folder))


def bootstrap(settings: LakeSettings) -> None:
    """Create the warehouse folder and the catalog tables (idempotent)."""
    ensure_warehouse(settings)
    if settings.is_sqlite:
        # WAL lets readers (DuckDB queries, status) proceed while a batch commits.
        path = make_url(settings.catalog_url).database
        with sqlite3.connect(path) as con:
            con.execute("PRAGMA journal_mode=WAL")
    pyiceberg_catalog(settings)


@lru_cache(maxsize=8)
def pyiceberg_catalog(settings: LakeSettings) -> SqlCatalog:
    """The same catalog through pyiceberg (creates the catalog tables if they are missing)."""
    ensure_warehouse(settings)
    try:
        return SqlCatalog(settings.catalog_name, uri=settings.catalog_url, warehouse=settings.warehouse_uri)
    except OperationalError as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        raise ConfigError(f"cannot open the Iceberg catalog database: {reason}", "LAKEMV_CATALOG_URI") from None
