"""DuckDB over the lake: each mirror and each materialized view as a plain-named DuckDB view, and
lakemv's own tables (`OPERATIONAL`) in the schema `lakemv`, and by plain name where no source or view
has that name.

Extensions cannot be downloaded here, so iceberg (and its avro dependency) are installed from the
PyPI wheels `duckdb-extension-*`. Each table is pinned to the metadata file the catalog points at
when the connection opens, so one connection reads one consistent snapshot per table.
"""

from __future__ import annotations

from collections.abc import Mapping

import duckdb
import duckdb_extensions
import pyarrow as pa

from lakemv.catalog.declarations import SourceTable, ViewSource
from lakemv.catalog.lake import table_locations
from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.tables import (
    BOOKKEEPING_NAMES,
    CHANGES_SUFFIX,
    DEAD_LETTERS,
    DELETED,
    LEDGER,
    MIRROR_NAMESPACE,
    OPS_NAMESPACE,
    VIEW_NAMESPACE,
)
from lakemv.core.errors import QueryError
from lakemv.core.sql.feedsql import FEEDS, ROW, feed_column, feed_view_sql
from lakemv.core.sql.quote import ansi_ident, ansi_string
from lakemv.duck.cut import NOT_YET, cut_time, snapshot_at


def connect_duckdb(threads: int | None = None, settings: LakeSettings | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the iceberg extension loaded from local wheels, UTC time zone; for a
    warehouse in an object store, with httpfs and a secret that reaches it."""
    config = {"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"}
    if threads:
        config["threads"] = str(threads)
    con = duckdb.connect(config=config)
    remote = settings is not None and settings.remote
    for name in ("avro", "iceberg", *(("httpfs", "aws") if remote else ())):
        duckdb_extensions.import_extension(name, con=con)
        con.execute(f"LOAD {name}")
    con.execute("SET TimeZone = 'UTC'")
    if remote:
        con.execute(s3_secret(settings))
    return con


def s3_secret(settings: LakeSettings) -> str:
    """DuckDB's CREATE SECRET for the warehouse's object store (from the same LAKEMV_S3_* settings)."""
    s3 = settings.s3
    parts = ["TYPE s3", f"REGION {ansi_string(s3.region)}", f"URL_STYLE '{'path' if s3.path_style else 'vhost'}'"]
    if s3.host:
        parts += [f"ENDPOINT {ansi_string(s3.host)}", f"USE_SSL {str(s3.secure).lower()}"]
    if s3.access_key_id:
        parts += [f"KEY_ID {ansi_string(s3.access_key_id)}", f"SECRET {ansi_string(s3.secret_access_key or '')}"]
    else:
        parts += ["PROVIDER credential_chain", "VALIDATION 'none'"]  # the AWS chain, or none at all for an open store
    return f"CREATE OR REPLACE SECRET lakemv_s3 ({', '.join(parts)})"


def metadata_location(settings: LakeSettings, namespace: str, table: str) -> str | None:
    """Current metadata file of an Iceberg table, or None if the table does not exist yet."""
    return table_locations(settings, namespace, table).get(table)


def view_tables(settings: LakeSettings) -> dict[str, str]:
    """Materialized views in the lake: name -> current metadata file (their change feeds: `feed_views`)."""
    return table_locations(settings, VIEW_NAMESPACE)


def feed_views(con: duckdb.DuckDBPyConnection, feeds: str) -> dict[str, list[str]]:
    """Each view the feeds table `feeds` (a relation in `con`) holds a feed of -> the view's key
    columns: its struct column's fields before `row` (lakemv.core.sql.feedsql)."""
    schema = con.execute(f"SELECT * FROM {feeds} LIMIT 0").to_arrow_table().schema
    prefix = feed_column("")
    return {
        field.name[len(prefix) :]: [f.name for f in field.type if f.name != ROW]
        for field in schema
        if field.name.startswith(prefix) and pa.types.is_struct(field.type)
    }


LATE_EVENTS = "late_events"
# lakemv's own tables as `lakemv query` names them: every line that could not be applied with its
# reason, one row per committed unit (the ledger), and per unit and event source its late events.
OPERATIONAL = (DEAD_LETTERS, LEDGER, LATE_EVENTS)


def _operational(con: duckdb.DuckDBPyConnection, ops: Mapping[str, str], taken: set[str]) -> None:
    """The dead letters, the ledger and the late events as views of the schema `lakemv`, and by plain
    name unless a source or a view (`taken`) has it; a table not created yet is left out."""
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {OPS_NAMESPACE}")
    for name in (DEAD_LETTERS, LEDGER):
        if name in ops:
            con.execute(f"CREATE VIEW {OPS_NAMESPACE}.{name} AS SELECT * FROM iceberg_scan({ansi_string(ops[name])})")
    if LEDGER in ops:
        columns = [row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {OPS_NAMESPACE}.{LEDGER}").fetchall()]
        late = "unnest(late)" if "late" in columns else "NULL::STRUCT(name VARCHAR, events BIGINT)"  # a ledger from before late counts
        con.execute(
            f"CREATE VIEW {OPS_NAMESPACE}.{LATE_EVENTS} AS SELECT stream_id, batch_id, chunk, finished_at, "
            "struct_extract(l, 'name') AS source, struct_extract(l, 'events') AS events "
            f"FROM (SELECT stream_id, batch_id, chunk, finished_at, {late} AS l FROM {OPS_NAMESPACE}.{LEDGER}) WHERE l IS NOT NULL"
        )
    for name in OPERATIONAL:
        if name not in taken and (name in ops or (name == LATE_EVENTS and LEDGER in ops)):
            con.execute(f"CREATE VIEW {ansi_ident(name)} AS SELECT * FROM {OPS_NAMESPACE}.{name}")


def lake_connection(
    settings: LakeSettings, sources: Mapping[str, SourceTable | ViewSource], snapshots: Mapping[str, int | None] | None = None, views: bool = True,
    consistent: bool = False,
) -> duckdb.DuckDBPyConnection:
    """DuckDB connection where every ingested source and every view (and its feed) is a view named after it.

    `snapshots` pins sources to a snapshot id (None: the table was still empty then). Without `views`,
    the sources only (a view recomputed from them: DuckDB reads each table's metadata to define its view).
    `consistent`: every table as the last committed batch left it (`lakemv.duck.cut`).
    """
    con = connect_duckdb(settings=settings)
    cut = cut_time(settings) if consistent else None

    def scan(location: str, pinned: int | None = None) -> str:
        """`iceberg_scan` of a table, at `pinned` or at the cut (an empty read of a table made after it)."""
        if cut is not None and pinned is None:
            pinned = snapshot_at(settings, location, cut)
            if pinned == NOT_YET:
                return f"(SELECT * FROM iceberg_scan({ansi_string(location)}) WHERE FALSE)"
        return f"iceberg_scan({ansi_string(location)}" + (f", snapshot_from_id => {int(pinned)})" if pinned else ")")

    mirrors = table_locations(settings, MIRROR_NAMESPACE)
    made = set(sources)
    for name, location in sorted(view_tables(settings).items() if views else ()):
        if name in sources or name.endswith(CHANGES_SUFFIX):
            continue  # a source's mirror wins (view names are checked against sources when planned); a feed table of an older lakemv: replaced below
        con.execute(f"CREATE VIEW {ansi_ident(name)} AS SELECT * FROM {scan(location)}")
        made.add(name)
    ops = table_locations(settings, OPS_NAMESPACE) if views else {}
    if FEEDS in ops:  # each view's feed: its rows of the one feeds table, under the name it always had
        con.execute(f"CREATE VIEW _lmv_feeds AS SELECT * FROM {scan(ops[FEEDS])}")
        for view, key in sorted(feed_views(con, "_lmv_feeds").items()):
            con.execute(f"CREATE VIEW {ansi_ident(view + CHANGES_SUFFIX)} AS {feed_view_sql(view, key, '_lmv_feeds', dialect='duckdb')}")
            made.add(view + CHANGES_SUFFIX)
    if views:
        _operational(con, ops, made)
    upstream = view_tables(settings) if any(s.is_view for s in sources.values()) else {}
    for source in sources.values():
        location = (upstream if source.is_view else mirrors).get(source.name)
        if location is None:
            continue
        pinned = (snapshots or {}).get(source.name)
        read = scan(location, pinned)
        if source.is_view:  # a view a view reads (its recompute's input), pinned like the mirrors
            empty = " WHERE FALSE" if snapshots and source.name in snapshots and snapshots[source.name] is None else ""
            con.execute(f"CREATE VIEW {ansi_ident(source.name)} AS SELECT * FROM {read}{empty}")
            continue
        # Declared columns first, then any the mirror gained from schema drift; no bookkeeping.
        present = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {read}").fetchall()]
        evolved = [c for c in present if c not in source.column_names and c not in BOOKKEEPING_NAMES]
        columns = ", ".join(ansi_ident(c) for c in (*source.column_names, *evolved))
        empty = " AND FALSE" if snapshots and source.name in snapshots and snapshots[source.name] is None else ""
        con.execute(f"CREATE VIEW {ansi_ident(source.name)} AS SELECT {columns} FROM {read} WHERE NOT {ansi_ident(DELETED)}{empty}")
    return con


def run_query(settings: LakeSettings, sources: Mapping[str, SourceTable], sql: str, consistent: bool = False) -> pa.Table:
    """Run ad-hoc SQL over the lake in DuckDB; a bad query raises QueryError with DuckDB's reason.
    `consistent`: every table as the last committed batch left it (`lakemv.duck.cut`)."""
    if not sql.strip() or not sql.strip().strip(";").strip():
        raise QueryError("the query is empty: give a SELECT, e.g. lakemv query \"select * from users limit 5\"")
    con = lake_connection(settings, sources, consistent=consistent)
    try:
        result = con.execute(sql)
        if result.description is None:  # a statement that returns no rows (e.g. SET)
            raise QueryError("the statement returned no result: lakemv query runs queries (SELECT ...)")
        return result.to_arrow_table()
    except duckdb.Error as exc:
        first = str(exc).strip().splitlines()[0]
        if isinstance(exc, duckdb.CatalogException) and "does not exist" in first:
            found = con.execute("SELECT schema_name, view_name FROM duckdb_views() WHERE NOT internal").fetchall()
            tables = ", ".join(sorted(n if s == "main" else f"{s}.{n}" for s, n in found if not n.startswith("_lmv")))
            first += f" (tables in the lake: {tables or 'none yet - run lakemv ingest'})"
        raise QueryError(first) from None
    finally:
        con.close()
