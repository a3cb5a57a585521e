"""The `lakemv` commands that look at the lake or seed it, without a flow run: generate, generate-events,
query, views, explain, status."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from lakemv.core.errors import ConfigError
from lakemv.flows.cliapp import LAKE, Format, app
from lakemv.flows.console import console, render
from lakemv.flows.context import Lake


@app.command(rich_help_panel=LAKE)
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


@app.command("generate-events", rich_help_panel=LAKE)
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
    from lakemv.catalog.brokers import check_bootstrap
    from lakemv.workload.eventstreams import EventConfig, EventWorkload, produce_round, write_round

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


@app.command(rich_help_panel=LAKE)
def query(
    ctx: typer.Context,
    sql: Annotated[str, typer.Argument(help="DuckDB SQL; tables by plain name (users, repos, ...), lakemv's own too: dead_letters, batches, late_events.")],
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,  # noqa: A002
    consistent: Annotated[
        bool, typer.Option("--consistent", help="Read every table as the last committed batch left it (views over views agree).")
    ] = False,
) -> None:
    """Query the lake with DuckDB: live rows only, no bookkeeping columns."""
    from lakemv.duck.query import run_query

    output = render(run_query(ctx.obj.settings, ctx.obj.sources, sql, consistent=consistent), format.value)
    if output:
        print(output)  # already rendered; printing through rich again would read data as markup


@app.command(rich_help_panel=LAKE)
def views(
    ctx: typer.Context,
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,  # noqa: A002
) -> None:
    """List the view definitions: name, key, tables read, how often it is maintained, file."""
    import pyarrow as pa

    from lakemv.core.batch.deferral import budget
    from lakemv.core.durations import format_duration

    plans = ctx.obj.checked_plans().values()
    waits = [budget(p, ctx.obj.settings.local_state) for p in plans]
    table = pa.table(
        {
            "view": [p.name for p in plans],
            "key": [", ".join(p.key_names) for p in plans],
            "reads": [", ".join(p.tables) for p in plans],
            "maintained": ["every batch" if w is None else f"within {format_duration(w)}" for w in waits],
            "file": [os.path.relpath(p.definition.location) if p.definition.location else None for p in plans],
        }
    )
    print(render(table, format.value))


@app.command(rich_help_panel=LAKE)
def explain(
    ctx: typer.Context,
    view: Annotated[str, typer.Argument(help="View name (file name without .sql).")],
    sql: Annotated[bool, typer.Option("--sql", help="Also print the SQL that recomputes affected keys.")] = False,
) -> None:
    """Show how changes reach a view's key and how its affected rows are recomputed."""
    from lakemv.catalog.tables import TableNames, live_rows_sql
    from lakemv.core.planner.explain import explain as explain_plan

    plan = ctx.obj.plan(view)
    plans = ctx.obj.checked_plans()
    live = None
    if sql:
        names = TableNames(ctx.obj.settings.catalog_name)
        read = {**ctx.obj.sources, **{v.name: v for v in plan.inputs}}
        live = {t: live_rows_sql(names, read[t]) for t in plan.tables}
    print(explain_plan(plan, live, _statistics(ctx.obj, plan), plans))


def _statistics(lake: Lake, plan):
    """The mirrors' counts for the cost section of explain (DuckDB, no Spark), or why there are none."""
    import duckdb
    from sqlglot.errors import SqlglotError

    from lakemv.catalog.tables import MIRROR_NAMESPACE, VIEW_NAMESPACE
    from lakemv.core.planner.cost import statistics, trees
    from lakemv.duck.query import lake_connection, metadata_location

    empty = [t for t in plan.tables if metadata_location(lake.settings, VIEW_NAMESPACE if t in plan.upstream else MIRROR_NAMESPACE, t) is None]
    if empty:
        return f"no rows ingested yet for {', '.join(empty)}: run lakemv ingest first"
    con = lake_connection(lake.settings, lake.sources)  # (the views by name too)
    try:
        read = {**lake.sources, **{v.name: v for v in plan.inputs}}
        return [(tree, statistics(con, tree, read)) for tree in trees(plan)]
    except (duckdb.Error, SqlglotError) as exc:
        return f"DuckDB could not count the mirrors ({str(exc).strip().splitlines()[0]})"
    finally:
        con.close()


@app.command(rich_help_panel=LAKE)
def status(
    ctx: typer.Context,
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,  # noqa: A002
) -> None:
    """Per source: last position, live rows, tombstones, dead letters; per view: last batch, rows, lag (no Spark)."""
    import pyarrow as pa

    from lakemv.core.batch.deferral import budget
    from lakemv.core.planner.dag import source_tables
    from lakemv.duck.status import lake_status, status_tables, to_seconds, with_kind

    views = {name: source_tables(ctx.obj.plans, name) for name in ctx.obj.plans}  # (through the views a view reads)
    budgets = {name: budget(plan, ctx.obj.settings.local_state) for name, plan in ctx.obj.plans.items()}
    tables = status_tables(lake_status(ctx.obj.settings, ctx.obj.sources, views, budgets=budgets))
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
            + "; lag = now - source time of the newest change applied (a view with a freshness budget: shown)"
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

    from lakemv.catalog.brokers import records_behind
    from lakemv.catalog.streams import KafkaTopics, consumed_offsets

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

    from lakemv.catalog.sinks import declared_sinks, sink_lags
    from lakemv.catalog.streams import kafka_checkpoint, mode_path

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
            rows = [lag.to_row() for lag in sink_lags(lake.settings, sinks)]
        except ConfigError as exc:  # e.g. a kafka sink and no brokers set: say so, report the rest of the lake
            rows = [{"sink": s.id, "view": s.view, "type": s.kind, "target": s.target, "error": str(exc)} for s in sinks]
        found["sink"] = pa.Table.from_pylist(rows)
    return found
