"""The `lakemv` command line: generate, ingest, query, views, explain, backfill, compact, status, demo.

User mistakes end as one red line."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import threading
import time
from contextlib import ExitStack
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from lakemv.catalog.settings import unknown_variables
from lakemv.catalog.writer import writer_lock
from lakemv.core.errors import ConfigError, LakemvError
from lakemv.core.failures import explain as explain_failure
from lakemv.core.runtime import lifecycle
from lakemv.flows.console import console, err_console, error_line, render
from lakemv.flows.lake import Lake
from lakemv.flows.progress import terminal

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="lakemv: materialized views on an Iceberg lakehouse, fresh from Debezium change streams.",
)


class Format(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


def _run_flow(ctx: typer.Context, flow: str, *, spark: bool = False, **parameters) -> dict:
    """Run the flow `module:function` in this process (a Prefect flow run), showing its progress.

    The API it records the run in (PREFECT_API_URL, or a temporary one started here), the JVM for
    flows that use Spark, and the import of Prefect and the flow all proceed side by side: start-up
    costs the slowest of them, not their sum. So the flow module is imported only once both started.
    """
    from lakemv.flows.server import PrefectApi

    api = PrefectApi.configured() or PrefectApi.temporary()  # a child: stopped when lakemv exits
    if spark:
        ctx.obj.warm_up()
    module, name = flow.split(":")
    flow = getattr(importlib.import_module(module), name)
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: api.ready()}), terminal(console):
        try:
            return flow(warehouse=str(ctx.obj.settings.warehouse), **parameters)
        finally:  # the run's logs reach the API while it is up (else: "APILogWorker failed with N pending items")
            from prefect.logging.handlers import APILogWorker

            APILogWorker.drain_all(timeout=5)


def _stack_commands() -> None:
    from lakemv.ops.clustercli import cluster_app
    from lakemv.ops.stackcli import stack_app

    app.add_typer(stack_app, name="stack")
    app.add_typer(cluster_app, name="cluster")


_stack_commands()


@app.callback()
def main_options(
    ctx: typer.Context,
    warehouse: Annotated[
        str | None,
        typer.Option(help="Warehouse: a folder or s3://bucket/prefix (env LAKEMV_WAREHOUSE).", show_default="./warehouse"),
    ] = None,
) -> None:
    for warning in unknown_variables(dict(os.environ)):
        err_console.print(error_line("warning:", warning, "yellow"))
    if warehouse is not None and not warehouse.strip():
        raise ConfigError("the warehouse is empty: give a folder or s3://bucket/prefix", "--warehouse")
    ctx.obj = Lake.at(warehouse)


@app.command()
def generate(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option(help="Landing directory to write <table>/*.json files into.")],
    users: Annotated[int, typer.Option(min=1, help="Number of users (scale).")],
    seed: Annotated[int, typer.Option(help="Random seed: same seed, same files.")] = 42,
    rounds: Annotated[int, typer.Option(min=1, help="Rounds: the snapshot, then change rounds.")] = 3,
    changes_per_round: Annotated[int | None, typer.Option(min=1, help="Changes per change round.")] = None,
) -> None:
    """Write a GitHub CDC workload (Debezium JSON lines) into a landing directory."""
    from lakemv.workload.github import WorkloadConfig, generate_files

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the output folder: {exc.strerror}", str(out)) from None
    started = time.perf_counter()
    config = WorkloadConfig(users=users, seed=seed, rounds=rounds, changes_per_round=changes_per_round)
    workload, events, files = generate_files(config, ctx.obj.sources, out)
    live = ", ".join(f"{t} {len(r)}" for t, r in workload.state.items())
    console.print(f"wrote {events} events in {files} files to {escape(str(out))} ({time.perf_counter() - started:.1f}s); live rows: {live}")


@app.command("generate-events")
def generate_events(
    out: Annotated[Path | None, typer.Option(help="Landing directory to write <stream>/*.json files into.")] = None,
    kafka: Annotated[str | None, typer.Option(help="Or produce to Kafka (HOST:PORT), a topic per stream.")] = None,
    events: Annotated[int, typer.Option(min=1, help="Page views; profile views and searches are a quarter each.")] = 10_000,
    rounds: Annotated[int, typer.Option(min=1, help="Rounds of arrivals (a file per stream each).")] = 5,
    seed: Annotated[int, typer.Option(help="Random seed: same seed, same events.")] = 7,
    late_share: Annotated[float, typer.Option(min=0.0, max=1.0, help="Share of events that arrive an hour late.")] = 0.01,
    duplicate_share: Annotated[float, typer.Option(min=0.0, max=1.0, help="Share of events delivered twice.")] = 0.01,
) -> None:
    """Write event streams (page views, profile views, searches, clicks) with out-of-order, late and
    repeated arrivals, for the sources in catalog/sources/events."""
    from lakemv.spark.stream.kafka import check_bootstrap
    from lakemv.workload.events import EventConfig, EventWorkload, produce_round, write_round

    if (out is None) == (kafka is None):
        raise ConfigError("give either --out DIR or --kafka HOST:PORT", "generate-events")
    if out is not None and out.exists() and not out.is_dir():
        raise ConfigError("cannot create the output folder: a file stands there", str(out))
    started = time.perf_counter()
    config = EventConfig(events=events, rounds=rounds, seed=seed, late_share=late_share, duplicate_share=duplicate_share)
    total = 0
    for number, lines in enumerate(EventWorkload(config).rounds()):
        total += write_round(out, number, lines) if out is not None else produce_round(check_bootstrap(kafka or ""), lines)
    where = str(out) if out is not None else f"Kafka at {kafka}"
    console.print(f"wrote {total:,} events in {rounds} rounds to {escape(str(where))} ({time.perf_counter() - started:.1f}s)")


def _check_landing(ctx: typer.Context, landing: Path, once: bool) -> None:
    """A landing folder that cannot be what the user meant is a usage error, before anything starts."""
    from lakemv.core.cdc.changeset import check_landing

    check_landing(landing)
    landed = (  # files in table folders, as Spark lists them (no hidden names)
        p for folder in landing.iterdir() if folder.is_dir() for p in folder.rglob("*")
        if p.is_file() and not any(part.startswith((".", "_")) for part in p.relative_to(landing).parts)
    )  # fmt: skip
    if once and next(landed, None) is None:
        tables = ", ".join(ctx.obj.sources)
        raise ConfigError(
            f"the landing directory holds no files: nothing to ingest (expected <landing>/<table>/*.json for {tables}; "
            "without --once, ingest waits for files to arrive)",
            str(landing),
        )


@app.command()
def ingest(
    ctx: typer.Context,
    landing: Annotated[Path | None, typer.Option(help="Landing directory: <landing>/<table>/*.json.")] = None,
    kafka: Annotated[
        str | None, typer.Option(help="Kafka brokers HOST:PORT to read Debezium's topics from (env LAKEMV_KAFKA_BOOTSTRAP).")
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="Process what is there now, then exit.")] = False,
    trigger_seconds: Annotated[float, typer.Option(min=0.1, help="Seconds between batches when continuous.")] = 2.0,
    max_files_per_trigger: Annotated[int | None, typer.Option(min=1, help="Backpressure: files per batch.")] = None,
) -> None:
    """Stream landing files or Kafka topics into the mirror tables and maintain the views (the `ingest` flow)."""
    option_kafka = kafka is not None
    kafka = kafka or (None if landing is not None else ctx.obj.settings.kafka_bootstrap)
    if (landing is None) == (kafka is None):
        raise ConfigError(
            "give --landing DIR or --kafka HOST:PORT (or set LAKEMV_KAFKA_BOOTSTRAP), not both" if landing else
            "nothing to ingest from: give --landing DIR or --kafka HOST:PORT (or set LAKEMV_KAFKA_BOOTSTRAP)"
        )  # fmt: skip
    settings = ctx.obj.settings
    with writer_lock(settings.local_root, settings.catalog_name, settings.warehouse, probe=True, lease=settings.lake):  # refused before anything starts
        pass
    if kafka is not None:
        from lakemv.spark.stream.kafka import check_bootstrap, reach_brokers

        given = check_bootstrap(kafka, "--kafka" if option_kafka else "LAKEMV_KAFKA_BOOTSTRAP")
        reach_brokers(given, settings.kafka_options)  # before Spark, which would wait for one forever
        _run_flow(ctx, "lakemv.flows.ingest:ingest", spark=True, kafka=given, once=once, trigger_seconds=trigger_seconds)
        return
    assert landing is not None
    _check_landing(ctx, landing, once)
    _run_flow(
        ctx,
        "lakemv.flows.ingest:ingest",
        spark=True,
        landing=str(landing.resolve()),
        once=once,
        trigger_seconds=trigger_seconds,
        max_files_per_trigger=max_files_per_trigger,
    )


@app.command()
def query(
    ctx: typer.Context,
    sql: Annotated[str, typer.Argument(help="DuckDB SQL; tables by plain name (users, repos, ...).")],
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,  # noqa: A002
) -> None:
    """Query the lake with DuckDB: live rows only, no bookkeeping columns."""
    from lakemv.duck.lake import run_query

    output = render(run_query(ctx.obj.settings, ctx.obj.sources, sql), format.value)
    if output:
        print(output)  # already rendered; printing through rich again would read data as markup


@app.command()
def views(
    ctx: typer.Context,
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,  # noqa: A002
) -> None:
    """List the view definitions: name, key, tables read, file."""
    import pyarrow as pa

    plans = ctx.obj.checked_plans().values()
    table = pa.table(
        {
            "view": [p.name for p in plans],
            "key": [", ".join(p.key_names) for p in plans],
            "reads": [", ".join(p.tables) for p in plans],
            "file": [os.path.relpath(p.definition.location) if p.definition.location else None for p in plans],
        }
    )
    print(render(table, format.value))


@app.command()
def explain(
    ctx: typer.Context,
    view: Annotated[str, typer.Argument(help="View name (file name without .sql).")],
    sql: Annotated[bool, typer.Option("--sql", help="Also print the SQL that recomputes affected keys.")] = False,
) -> None:
    """Show how changes reach a view's key and how its affected rows are recomputed."""
    from lakemv.catalog.tables import TableNames
    from lakemv.core.planner.explain import explain as explain_plan
    from lakemv.spark.mirror import live_rows_sql

    plan = ctx.obj.plan(view)
    ctx.obj.checked_plans()
    live = None
    if sql:
        names = TableNames(ctx.obj.settings.catalog_name)
        live = {t: live_rows_sql(names, ctx.obj.sources[t]) for t in plan.tables}
    print(explain_plan(plan, live, _statistics(ctx.obj, plan)))


def _statistics(lake: Lake, plan):
    """The mirrors' counts for the cost section of explain (DuckDB, no Spark), or why there are none."""
    import duckdb
    from sqlglot.errors import SqlglotError

    from lakemv.catalog.tables import MIRROR_NAMESPACE
    from lakemv.core.planner.cost import statistics, trees
    from lakemv.duck.lake import lake_connection, metadata_location

    empty = [t for t in plan.tables if metadata_location(lake.settings, MIRROR_NAMESPACE, t) is None]
    if empty:
        return f"no rows ingested yet for {', '.join(empty)}: run lakemv ingest first"
    con = lake_connection(lake.settings, lake.sources)
    try:
        return [(tree, statistics(con, tree, lake.sources)) for tree in trees(plan)]
    except (duckdb.Error, SqlglotError) as exc:
        return f"DuckDB could not count the mirrors ({str(exc).strip().splitlines()[0]})"
    finally:
        con.close()


@app.command()
def backfill(
    ctx: typer.Context,
    view: Annotated[str, typer.Argument(help="View name to rebuild from the mirrors.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan and the estimated row count only.")] = False,
) -> None:
    """Rebuild a view by write-audit-publish on an Iceberg branch; safe while ingest runs."""
    ctx.obj.plan(view)  # an unknown view is a usage error, before Prefect starts
    _run_flow(ctx, "lakemv.flows.backfill:backfill", spark=True, view=view, dry_run=dry_run)


@app.command()
def verify(
    ctx: typer.Context,
    view: Annotated[str, typer.Argument(help="View name to check against an independent DuckDB recompute.")],
    sample: Annotated[int, typer.Option(min=0, help="Differing keys to show per kind.")] = 5,
) -> None:
    """Recompute a view with DuckDB from the mirrors and diff it with the view table; exit 1 on any difference."""
    ctx.obj.plan(view)  # an unknown view is a usage error, before Prefect starts
    _run_flow(ctx, "lakemv.flows.verify:verify", view=view, sample=sample)


@app.command()
def compact(
    ctx: typer.Context,
    tables: Annotated[
        list[str] | None, typer.Argument(help="Tables as namespace.name (default: every mirror, view and ops table).")
    ] = None,
    retention_hours: Annotated[
        float, typer.Option(min=0.25, help="Expire snapshots older than this (keeping the last 5, and those a stream's replay may need).")
    ] = 1.0,
    orphan_age_hours: Annotated[float, typer.Option(min=1, help="Remove unreferenced files older than this.")] = 72.0,
    tombstone_retention_hours: Annotated[
        float, typer.Option(min=1, help="Purge mirror tombstones ingested longer ago than this.")
    ] = 168.0,
) -> None:
    """Compact files in the lookup-aware layout, expire snapshots, remove orphans, purge old tombstones."""
    if tables:  # named tables are checked before Spark starts: a typo costs a second, not a JVM
        from lakemv.catalog.lake import pyiceberg_catalog
        from lakemv.catalog.tables import MIRROR_NAMESPACE, OPS_NAMESPACE, VIEW_NAMESPACE, check_tables

        catalog = pyiceberg_catalog(ctx.obj.settings)
        namespaces = catalog.list_namespaces()
        check_tables(tables, [".".join(i) for ns in (MIRROR_NAMESPACE, VIEW_NAMESPACE, OPS_NAMESPACE) if (ns,) in namespaces for i in catalog.list_tables(ns)])
    _run_flow(
        ctx,
        "lakemv.flows.compact:compact",
        spark=True,
        tables=tables or None,
        retention_hours=retention_hours,
        orphan_age_hours=orphan_age_hours,
        tombstone_retention_hours=tombstone_retention_hours,
    )


@app.command()
def serve(
    ctx: typer.Context,
    landing: Annotated[Path | None, typer.Option(help="Landing directory the ingest deployment reads.")] = None,
    kafka: Annotated[
        str | None, typer.Option(help="Or Kafka brokers HOST:PORT whose Debezium topics it ingests (env LAKEMV_KAFKA_BOOTSTRAP).")
    ] = None,
    ingest_every: Annotated[
        float, typer.Option("--ingest-every", "--maintain-every", min=1, help="Seconds between ingest runs.")
    ] = 60.0,
    continuous: Annotated[
        bool, typer.Option("--continuous", help="Ingest as one long-running stream (restarted by the schedule).")
    ] = False,
    trigger_seconds: Annotated[float, typer.Option(min=0.1, help="Seconds between batches when continuous.")] = 2.0,
    compact_every: Annotated[float, typer.Option(min=1, help="Seconds between compact runs.")] = 3600.0,
    verify_every: Annotated[float, typer.Option(min=1, help="Seconds between verify runs.")] = 3600.0,
    retention_hours: Annotated[
        float | None, typer.Option(min=0.25, help="Snapshot expiry of the compact runs (default: compact's own, 1 hour).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port of the local Prefect server (when PREFECT_API_URL is unset).")] = None,
) -> None:
    """Serve the Prefect deployments ingest, compact, verify (scheduled) and backfill (on demand) until interrupted."""
    from lakemv.flows.server import prefect_api

    settings = ctx.obj.settings
    kafka = kafka or (None if landing is not None else settings.kafka_bootstrap)
    if (landing is None) == (kafka is None):
        raise ConfigError("give --landing DIR or --kafka HOST:PORT (or set LAKEMV_KAFKA_BOOTSTRAP), not both" if landing else
                          "nothing to ingest from: give --landing DIR or --kafka HOST:PORT (or set LAKEMV_KAFKA_BOOTSTRAP)")  # fmt: skip
    if landing is not None:
        _check_landing(ctx, landing, once=False)
    else:
        from lakemv.spark.stream.kafka import check_bootstrap

        kafka = check_bootstrap(kafka)  # type: ignore[arg-type]
    ctx.obj.checked_plans()  # a refused view fails here, before anything starts
    from lakemv.spark.session import stop_spark

    stop_spark()  # if the check started a JVM: serve itself runs no Spark (flow runs have their own)
    os.environ["PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL"] = "INFO"  # flow runs log to this terminal
    with ExitStack() as stack:
        with console.status("starting the Prefect server..."):
            api = stack.enter_context(prefect_api(settings.local_root / "_prefect", port))
        from prefect import serve as serve_deployments
        from prefect.settings import PREFECT_API_URL, temporary_settings

        from lakemv.flows.deployments import Schedules, deployments, retire

        schedules = Schedules(ingest_every, continuous, trigger_seconds, compact_every, verify_every, retention_hours)
        console.print(f"Prefect API: {escape(str(api))}")
        with temporary_settings(updates={PREFECT_API_URL: api}):
            for name in retire():
                console.print(f"deleted the deployment {escape(name)} (renamed; this lakemv no longer serves it)")
            # Prefect's runner takes SIGTERM for itself when it runs in the main thread; in a worker
            # thread it leaves the signals to lakemv, which stops the server and every flow run.
            running = threading.Thread(
                target=serve_deployments,
                args=deployments(landing.resolve() if landing else None, settings.warehouse, schedules, kafka=kafka),
                kwargs={"print_starting_message": True},
                name="prefect-serve",
                daemon=True,
            )
            running.start()
            while running.is_alive():
                running.join(0.5)


@app.command()
def status(
    ctx: typer.Context,
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,  # noqa: A002
) -> None:
    """Per source: last position, live rows, tombstones, dead letters; per view: last batch, rows, lag (no Spark)."""
    import pyarrow as pa

    from lakemv.duck.status import lake_status, status_tables, to_seconds, with_kind

    views = {name: plan.tables for name, plan in ctx.obj.plans.items()}
    tables = status_tables(lake_status(ctx.obj.settings, ctx.obj.sources, views))
    tables.update(_stream_tables(ctx.obj))
    if format is Format.json:  # one object per line, each with its `kind`: source, view, totals, stream, sink
        print("\n".join(out for kind, t in tables.items() if (out := render(with_kind(kind, t), "json"))))
    elif format is Format.csv:  # one CSV: the union of the kinds' columns
        print(render(pa.concat_tables([with_kind(k, t) for k, t in tables.items()], promote_options="default"), "csv"))
    else:
        totals = tables["totals"].to_pylist()[0]
        for kind in ("source", "view", "stream", "sink"):
            if kind in tables and tables[kind].num_rows:
                print(render(to_seconds(tables[kind]), "table"))
        unattributed = totals["dead_letters_unattributed"]
        console.print(
            f"{totals['live_rows']} live rows, {totals['tombstones']} tombstones, {totals['dead_letters']} dead letters"
            + (f" ({unattributed} from folders that are not a declared source)" if unattributed else "")
            + "; lag = now - source time of the newest change applied"
        )
        for source in tables["source"].to_pylist():
            if source["unique_violations"]:
                console.print(
                    f"[red]{source['table']}: {source['unique_violations']} values of a declared unique key are held by several "
                    "live rows: view keys that join through them keep their previous rows (the dead letters name the rows)[/]"
                )
        for view in tables["view"].to_pylist():
            if view["maintenance"] == "paused":
                console.print(
                    f"[yellow]{view['view']} is paused by backfill {view['backfill']} since {view['maintenance_since']:%Y-%m-%d %H:%M:%S}Z:"
                    f" batches skip it until that backfill publishes; if it was stopped, `lakemv backfill {view['view']}` takes it over[/]"
                )


def _kafka_progress(lake: Lake, checkpoint) -> tuple[int | None, str]:  # noqa: ANN001 - a lakemv.catalog.storage.Location
    """(records behind, what that means): the stream's consumed offsets against the topics' ends."""
    from confluent_kafka import KafkaException

    from lakemv.spark.stream.kafka import KafkaTopics, consumed_offsets, records_behind

    settings = lake.settings
    if not settings.kafka_bootstrap:
        return None, "unknown: set LAKEMV_KAFKA_BOOTSTRAP to compare with the topics' ends"
    try:
        pattern = KafkaTopics.of(settings, lake.sources).pattern
        behind = records_behind(settings.kafka_bootstrap, pattern, consumed_offsets(checkpoint), settings.kafka_options)
    except KafkaException as exc:
        return None, f"unknown: Kafka at {settings.kafka_bootstrap} did not answer ({exc.args[0].str() if exc.args else exc})"
    return behind, "caught up" if behind == 0 else f"{behind:,} records behind"


def _stream_tables(lake: Lake) -> dict:
    """The Kafka stream's transaction mode, and each data product's lag behind its view's feed."""
    import pyarrow as pa

    from lakemv.spark.sinks.products import Publisher, declared_sinks
    from lakemv.spark.stream.kafka import kafka_checkpoint, mode_path

    found = {}
    checkpoint = kafka_checkpoint(lake.settings)
    mode = mode_path(checkpoint)
    if mode.exists() or (checkpoint / "commits").exists():
        row = {"source": "kafka", **(json.loads(mode.read_text()) if mode.exists() else {})}
        row["records_behind"], row["progress"] = _kafka_progress(lake, checkpoint)
        found["stream"] = pa.Table.from_pylist([row])
    sinks = declared_sinks(lake.settings, lake.plans.values())
    if sinks:
        try:
            rows = [lag.to_row() for lag in Publisher(None, lake.settings, sinks).lags()]
        except ConfigError as exc:  # e.g. a kafka sink and no brokers set: say so, report the rest of the lake
            rows = [{"sink": s.id, "view": s.view, "type": s.kind, "target": s.target, "error": str(exc)} for s in sinks]
        found["sink"] = pa.Table.from_pylist(rows)
    return found


@app.command()
def demo(
    ctx: typer.Context,
    users: Annotated[int, typer.Option(min=1, help="Number of users to generate.")] = 2000,
    rounds: Annotated[int, typer.Option(min=1, help="Rounds (snapshot + changes).")] = 3,
) -> None:
    """The end-to-end tour: generate a GitHub workload, ingest it, print rows of the lake."""
    from lakemv.duck.lake import run_query
    from lakemv.spark.stream.files import checkpoint_dir

    settings = ctx.obj.settings
    landing = settings.local_root / "demo-landing"
    shutil.rmtree(landing, ignore_errors=True)
    checkpoint_dir(settings, landing).remove()
    console.rule("1. generate")
    ctx.invoke(generate, ctx=ctx, out=landing, users=users, seed=42, rounds=rounds, changes_per_round=None)
    console.rule("2. ingest")
    ctx.invoke(ingest, ctx=ctx, landing=landing, once=True, trigger_seconds=2.0, max_files_per_trigger=5)
    console.rule("3. query the lake (DuckDB)")
    for table in ctx.obj.sources:
        count = run_query(settings, ctx.obj.sources, f'SELECT count(*) AS n FROM "{table}"').column("n")[0].as_py()
        console.print(f"[bold]{escape(table)}[/bold]: {count} live rows")
        print(render(run_query(settings, ctx.obj.sources, f'SELECT * FROM "{table}" LIMIT 3'), "table"))
    console.rule("4. materialized views, maintained incrementally in every batch")
    for view in ctx.obj.plans:
        count = run_query(settings, ctx.obj.sources, f'SELECT count(*) AS n FROM "{view}"').column("n")[0].as_py()
        console.print(f"[bold]{escape(view)}[/bold]: {count} rows (key: {escape(', '.join(ctx.obj.plans[view].key_names))})")
        print(render(run_query(settings, ctx.obj.sources, f'SELECT * FROM "{view}" LIMIT 2'), "json"))
    console.print("try: lakemv query \"select username, count(*) from pull_requests p join users u on p.author = u.username group by 1 order by 2 desc limit 5\"")


def _prefect_for_the_terminal() -> None:
    """Flows run by the CLI report through the rich console; Prefect's own console lines (run
    banners, tracebacks of a failed run: those go to the API) and telemetry stay off."""
    os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "CRITICAL")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


def main() -> None:
    """Entry point: run the app; LakemvError and usage mistakes print one line, never a trace.

    SIGINT and SIGTERM stop the command and everything it started (see `lakemv.core.runtime.lifecycle`)."""
    _prefect_for_the_terminal()
    lifecycle.install(subreaper=True)
    code = 0
    try:
        result = app(standalone_mode=False)
        code = result if isinstance(result, int) else 0
    except (KeyboardInterrupt, typer.Abort):  # click turns a KeyboardInterrupt into Abort
        code = 128 + lifecycle.last_signal()
        if not lifecycle.stopping():  # not a signal (e.g. end of input at a prompt); a stop says so below
            err_console.print("interrupted")
        if os.environ.get("LAKEMV_DEBUG"):
            import traceback

            traceback.print_exc()
    except LakemvError as exc:
        err_console.print(error_line("error:", str(exc)))
        code = 1
    except typer.TyperException as exc:  # usage mistakes (typer vendors click's exceptions)
        ctx = getattr(exc, "ctx", None)
        hint = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
        message = (exc.format_message() if hasattr(exc, "format_message") else str(exc)) or "Missing command."
        err_console.print(error_line("error:", f"{message}{hint}"))
        code = getattr(exc, "exit_code", 2)
    except Exception as exc:  # noqa: BLE001 - last resort: one line unless debugging
        if os.environ.get("LAKEMV_DEBUG"):
            raise
        reason = explain_failure(exc)
        if reason is not None:  # the machine's fault, not lakemv's: disk full, permissions, a server down
            err_console.print(error_line("error:", reason))
            code = 1
        else:
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            err_console.print(error_line("internal error:", f"{type(exc).__name__}: {first} (LAKEMV_DEBUG=1 shows the trace)"))
            code = 70
    if lifecycle.stopping():  # however the stop surfaced (an exception, or an exit code from a library)
        code = 128 + lifecycle.last_signal()
        err_console.print(f"stopped ({lifecycle.signal_name()}); work cut short is redone by the next run")
    lifecycle.finish(code)
