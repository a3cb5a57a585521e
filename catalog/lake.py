"""The Iceberg catalog `lake`, wired for Spark, pyiceberg and DuckDB from one LakeSettings.

The engines talk to the same catalog: a JDBC catalog database (SQLite by default, PostgreSQL by
settings) or a REST catalog server (LAKEMV_CATALOG_URI=http://...). With a JDBC catalog pyiceberg
creates the catalog tables once; Spark then runs with `jdbc.init-catalog-tables=false`, which avoids
the SQLite read transaction a second JdbcCatalog instance would otherwise hold (see PLATFORM-NOTES,
"Locking trap"). A warehouse in an object store gives every engine Iceberg's S3 FileIO settings.
"""

from __future__ import annotations

import os
import re
import sqlite3
from contextlib import closing
from functools import lru_cache
from typing import TYPE_CHECKING

from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from lakemv.catalog.settings import LakeSettings
from lakemv.core.errors import ConfigError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

# The tables of Iceberg's JDBC catalog schema (V1), which pyiceberg's SqlCatalog creates when missing;
# the first holds every table's current metadata file.
CATALOG_TABLES = ("iceberg_tables", "iceberg_namespace_properties")


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


def s3_properties(settings: LakeSettings) -> dict[str, str]:
    """Iceberg's S3FileIO properties (the same keys for the Java catalogs and pyiceberg)."""
    if not settings.remote:
        return {}
    s3 = settings.s3
    props = {"io-impl": "org.apache.iceberg.aws.s3.S3FileIO", "client.region": s3.region, "s3.region": s3.region}
    if s3.endpoint:
        props["s3.endpoint"] = s3.endpoint
    if s3.path_style:
        props["s3.path-style-access"] = "true"
    if s3.access_key_id:
        props["s3.access-key-id"] = s3.access_key_id
    if s3.secret_access_key:
        props["s3.secret-access-key"] = s3.secret_access_key
    return props


def hadoop_s3_conf(settings: LakeSettings) -> dict[str, str]:
    """Hadoop's s3a settings (Spark conf keys), for checkpoints and Delta products in the object store."""
    if not settings.remote:
        return {}
    s3 = settings.s3
    conf = {
        "spark.hadoop.fs.s3a.endpoint.region": s3.region,
        "spark.hadoop.fs.s3a.path.style.access": str(s3.path_style).lower(),
        # Iceberg's tables say s3://: what lists them through Hadoop (remove_orphan_files) uses s3a
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    }
    if s3.endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = s3.endpoint
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(s3.secure).lower()
    if s3.access_key_id:
        conf["spark.hadoop.fs.s3a.access.key"] = s3.access_key_id
        conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
    if s3.secret_access_key:
        conf["spark.hadoop.fs.s3a.secret.key"] = s3.secret_access_key
    return conf


def delta_rs_options(settings: LakeSettings) -> dict[str, str] | None:
    """delta-rs's storage options for Delta tables in the object store (None on a local disk)."""
    if not settings.remote:
        return None
    s3 = settings.s3
    options = {"AWS_REGION": s3.region, "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    if s3.endpoint:
        options["AWS_ENDPOINT_URL"] = s3.endpoint
        options["AWS_ALLOW_HTTP"] = str(not s3.secure).lower()
    if s3.path_style:
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
    if s3.access_key_id:
        options["AWS_ACCESS_KEY_ID"] = s3.access_key_id
    if s3.secret_access_key:
        options["AWS_SECRET_ACCESS_KEY"] = s3.secret_access_key
    return options


def spark_catalog_conf(settings: LakeSettings) -> dict[str, str]:
    """Spark conf entries that define the Iceberg catalog `settings.catalog_name`."""
    prefix = f"spark.sql.catalog.{settings.catalog_name}"
    conf = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.warehouse": settings.warehouse_uri,
        # Other processes (pyiceberg, DuckDB readers, maintenance) commit too: always reload metadata.
        f"{prefix}.cache-enabled": "false",
    }
    if settings.is_rest:
        conf[f"{prefix}.type"] = "rest"
        conf[f"{prefix}.uri"] = settings.catalog_uri.strip()
    else:
        conf[f"{prefix}.catalog-impl"] = "org.apache.iceberg.jdbc.JdbcCatalog"
        conf[f"{prefix}.jdbc.schema-version"] = "V1"
        conf[f"{prefix}.jdbc.init-catalog-tables"] = "false"
        conf.update({f"{prefix}.{k}": v for k, v in jdbc_properties(settings).items()})
    conf.update({f"{prefix}.{k}": v for k, v in s3_properties(settings).items()})
    return conf


def ensure_warehouse(settings: LakeSettings) -> None:
    """Create the warehouse folder (the local folder, for a warehouse in an object store), or say
    clearly why it cannot be used."""
    folder = settings.local_root
    what = "LAKEMV_LOCAL_DIR" if settings.local_dir is not None else "the warehouse folder"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create {what} there: {exc.strerror}", str(folder)) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{what} is not writable", str(folder))


def bootstrap(settings: LakeSettings) -> None:
    """Create the warehouse folder and the catalog tables (idempotent). A SQLite catalog that has its
    tables already is left to Spark: a process that needs no pyiceberg then never imports it (~1 s of
    CPU at each start)."""
    ensure_warehouse(settings)
    if settings.remote:
        ensure_bucket(settings)
    if settings.is_sqlite:
        # WAL lets readers (DuckDB queries, status) proceed while a batch commits.
        with closing(sqlite3.connect(_sqlite_path(settings))) as con:
            con.execute("PRAGMA journal_mode=WAL")
            if _has_tables(con, CATALOG_TABLES):
                return
    pyiceberg_catalog(settings)


def _sqlite_path(settings: LakeSettings) -> str:
    """The file of a SQLite catalog."""
    return make_url(settings.catalog_url).database


def _has_tables(con: sqlite3.Connection, names: tuple[str, ...]) -> bool:
    """Whether the SQLite database has every table of `names`."""
    marks = ",".join("?" * len(names))
    found = con.execute(f"SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ({marks})", names)
    return found.fetchone()[0] == len(names)


def table_locations(settings: LakeSettings, namespace: str, table: str | None = None) -> dict[str, str]:
    """Each table of `namespace` (or the one named `table`, if it exists) -> its current metadata file.
    A SQLite catalog is read where Iceberg's JDBC catalog keeps them, its `iceberg_tables` (one query:
    no pyiceberg to import, no metadata file parsed; its Iceberg views are left out); any other
    catalog through pyiceberg."""
    ensure_warehouse(settings)  # an unusable warehouse is a clear error here, as pyiceberg's catalog makes it
    if settings.is_sqlite:
        path = _sqlite_path(settings)
        if not path or not os.path.exists(path):
            return {}
        with closing(sqlite3.connect(path, timeout=30)) as con:
            if not _has_tables(con, CATALOG_TABLES[:1]):  # no engine has used this catalog yet
                return {}
            found = con.execute(
                "SELECT table_name, metadata_location FROM iceberg_tables"
                " WHERE catalog_name = ? AND table_namespace = ? AND coalesce(iceberg_type, 'TABLE') = 'TABLE'"
                + (" AND table_name = ?" if table is not None else ""),
                (settings.catalog_name, namespace, *((table,) if table is not None else ())),
            ).fetchall()
        return {name: location for name, location in found if location}
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    catalog = pyiceberg_catalog(settings)
    try:
        identifiers = [(namespace, table)] if table is not None else catalog.list_tables(namespace)
    except NoSuchNamespaceError:
        return {}
    locations = {}
    for identifier in identifiers:
        try:
            locations[identifier[-1]] = catalog.load_table(identifier).metadata_location
        except (NoSuchTableError, NoSuchNamespaceError):  # not there, or dropped between listing and loading
            continue
    return locations


def ensure_bucket(settings: LakeSettings) -> None:
    """Check that the warehouse's bucket can be reached, or say clearly why not (ConfigError)."""
    import pyarrow.fs as pafs

    from lakemv.catalog.storage import s3_filesystem, split_s3

    bucket, _ = split_s3(settings.warehouse)
    where = settings.s3.endpoint or "AWS S3"
    try:
        info = s3_filesystem(settings.s3).get_file_info(bucket)
    except OSError as exc:
        reason = str(exc).strip().splitlines()[0]
        raise ConfigError(f"cannot reach the warehouse's bucket {bucket!r} at {where}: {reason}", "LAKEMV_S3_ENDPOINT") from None
    if info.type == pafs.FileType.NotFound:
        raise ConfigError(f"the warehouse's bucket {bucket!r} does not exist at {where}", "LAKEMV_WAREHOUSE")


@lru_cache(maxsize=8)
def pyiceberg_catalog(settings: LakeSettings) -> Catalog:
    """The same catalog through pyiceberg (for a JDBC catalog, creates its tables if they are missing)."""
    from pyiceberg.catalog.sql import SqlCatalog

    ensure_warehouse(settings)
    if settings.is_rest:
        return rest_catalog(settings)
    try:
        return SqlCatalog(
            settings.catalog_name, uri=settings.catalog_url, warehouse=settings.warehouse_uri, **_pyiceberg_s3(settings)
        )
    except OperationalError as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        raise ConfigError(f"cannot open the Iceberg catalog database: {reason}", "LAKEMV_CATALOG_URI") from None


def _pyiceberg_s3(settings: LakeSettings) -> dict[str, str]:
    """pyiceberg's FileIO for an object store: its own (pyarrow) S3 FileIO, from the same properties."""
    props = {k: v for k, v in s3_properties(settings).items() if k != "io-impl"}
    if props:
        props["py-io-impl"] = "pyiceberg.io.pyarrow.PyArrowFileIO"
    return props


def rest_catalog(settings: LakeSettings) -> Catalog:
    """A REST catalog through pyiceberg, or a ConfigError naming the server that did not answer."""
    from pyiceberg.catalog.rest import RestCatalog

    uri = settings.catalog_uri.strip()
    try:
        return RestCatalog(settings.catalog_name, uri=uri, warehouse=settings.warehouse_uri, **_pyiceberg_s3(settings))
    except Exception as exc:  # noqa: BLE001 - requests' and pyiceberg's errors alike: the server is unusable
        raise ConfigError(f"cannot reach the REST catalog at {uri}: {_network_reason(exc)}", "LAKEMV_CATALOG_URI") from None


def _network_reason(exc: BaseException) -> str:
    """What went wrong on the network, in a few words: requests wraps the OS's reason
    (`[Errno 111] Connection refused`) in a retry report holding the whole request URL."""
    text = str(exc).strip()
    found = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", text)
    if found:
        return found.group(1).strip().rstrip(".").lower()
    if "timed out" in text.lower():
        return "timed out"
    return text.splitlines()[0] if text else type(exc).__name__
