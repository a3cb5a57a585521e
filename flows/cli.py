"""The `lakemv` command line. This module runs the pipeline: ingest, serve, backfill, verify, compact, demo
(each a Prefect flow run); `lakemv.flows.lakecli` looks at the lake. User mistakes end as one red line."""

from __future__ import annotations

import os
import shutil
import threading
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from lakemv.catalog.upkeep import (
    DEFAULT_ORPHAN_AGE,
    DEFAULT_RETENTION,
    DEFAULT_TOMBSTONE_RETENTION,
    MIN_ORPHAN_AGE,
    MIN_RETENTION,
    MIN_TOMBSTONE_RETENTION,
    hours,
)
from lakemv.catalog.writer import writer_lock
from lakemv.core.errors import ConfigError, LakemvError
from lakemv.core.failures import explain as explain_failure
from lakemv.core.failures import python_origin
from lakemv.core.runtime import lifecycle
from lakemv.flows.cliapp import PIPELINE, LogFormat, _run_flow, app
from lakemv.flows.console import console, err_console, error_line, render

__all__ = ["app", "main"]


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


@app.command(rich_help_panel=PIPELINE)
def ingest(
    ctx: typer.Context,
    landing: Annotated[Path | None, typer.Option(help="Landing directory: <landing>/<table>/*.json.")] = None,
    kafka: Annotated[
        str | None, typer.Option(help="Kafka brokers HOST:PORT to read Debezium's topics from (env LAKEMV_KAFKA_BOOTSTRAP).")
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="Process what is there now, then exit.")] = False,
    trigger_seconds: Annotated[float, typer.Option(min=0.1, help="Seconds between batches when continuous.")] = 2.0,
    max_files_per_trigger: Annotated[int | None, typer.Option(min=1, help="Backpressure: files per batch.")] = None,
    log_format: Annotated[
        LogFormat | None, typer.Option("--log-format", help="Each batch as a line of text, or one JSON object per line (env LAKEMV_LOG_FORMAT).")
    ] = None,
) -> None:
    """Stream landing files or Kafka topics into the mirror tables and maintain the views (the `ingest` flow)."""
    form = {"log_format": log_format.value} if log_format is not None else {}
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
        from lakemv.catalog.brokers import check_bootstrap, reach_brokers

        given = check_bootstrap(kafka, "--kafka" if option_kafka else "LAKEMV_KAFKA_BOOTSTRAP")
        reach_brokers(given, settings.kafka_options)  # before Spark, which would wait for one forever
        _run_flow(ctx, "lakemv.flows.ingest:ingest", spark=True, kafka=given, once=once, trigger_seconds=trigger_seconds, **form)
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
        **form,
    )


@app.command(rich_help_panel=PIPELINE)
def backfill(
    ctx: typer.Context,
    view: Annotated[str, typer.Argument(help="View name to rebuild from the mirrors.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan and the estimated row count only.")] = False,
) -> None:
    """Rebuild a view by write-audit-publish on an Iceberg branch; safe while ingest runs."""
    ctx.obj.plan(view)  # an unknown view is a usage error, before Prefect starts
    _run_flow(ctx, "lakemv.flows.backfill:backfill", spark=True, view=view, dry_run=dry_run)


@app.command(rich_help_panel=PIPELINE)
def verify(
    ctx: typer.Context,
    view: Annotated[str | None, typer.Argument(help="View name to check against an independent DuckDB recompute (default: every view).")] = None,
    sample: Annotated[int, typer.Option(min=0, help="Differing keys to show per kind.")] = 5,
) -> None:
    """Recompute a view (or every view) with DuckDB from the mirrors and diff it with the view table; exit 1 on any difference."""
    if view is not None:
        ctx.obj.plan(view)  # an unknown view is a usage error, before Prefect starts
    _run_flow(ctx, "lakemv.flows.verify:verify", view=view, sample=sample)


@app.command(rich_help_panel=PIPELINE)
def compact(
    ctx: typer.Context,
    tables: Annotated[
        list[str] | None, typer.Argument(help="Tables as namespace.name (default: every mirror, view and ops table).")
    ] = None,
    retention_hours: Annotated[
        float,
        typer.Option(min=hours(MIN_RETENTION), help="Expire snapshots older than this (keeping the last 5, and those a stream's replay may need)."),
    ] = hours(DEFAULT_RETENTION),
    orphan_age_hours: Annotated[
        float, typer.Option(min=hours(MIN_ORPHAN_AGE), help="Remove unreferenced files older than this.")
    ] = hours(DEFAULT_ORPHAN_AGE),
    tombstone_retention_hours: Annotated[
        float, typer.Option(min=hours(MIN_TOMBSTONE_RETENTION), help="Purge mirror tombstones ingested longer ago than this.")
    ] = hours(DEFAULT_TOMBSTONE_RETENTION),
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


@app.command(rich_help_panel=PIPELINE)
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
        float | None, typer.Option(min=hours(MIN_RETENTION), help="Snapshot expiry of the compact runs (default: compact's own, 1 hour).")
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
        from lakemv.catalog.brokers import check_bootstrap

        kafka = check_bootstrap(kafka)  # type: ignore[arg-type]
    from lakemv.spark.session import stop_spark

    def check() -> None:
        ctx.obj.checked_plans()  # a refused view fails here, before any deployment is served
        stop_spark()  # if the check started a JVM: serve itself runs no Spark (flow runs have their own)

    with ExitStack() as stack:
        with console.status("checking the views, starting the Prefect server..."):  # side by side
            api = stack.enter_context(prefect_api(settings.local_root / "_prefect", port, meanwhile=check))
        os.environ["PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL"] = "INFO"  # flow runs log to this terminal
        from prefect import serve as serve_deployments
        from prefect.settings import PREFECT_API_URL, temporary_settings

        from lakemv.flows.deployments import Schedules, abandoned_runs_crashed, deployments, retire

        schedules = Schedules(ingest_every, continuous, trigger_seconds, compact_every, verify_every, retention_hours)
        console.print(f"Prefect API: {escape(api.url)}")
        with temporary_settings(updates={PREFECT_API_URL: api.url}):
            for name in retire():
                console.print(f"deleted the deployment {escape(name)} (renamed; this lakemv no longer serves it)")
            if api.launched:  # its runs were all served by earlier serves of this lake, which are gone
                for name in abandoned_runs_crashed():
                    console.print(f"marked the flow run {escape(name)} crashed: the serve that ran it stopped before it ended")
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


@app.command(rich_help_panel=PIPELINE)
def demo(
    ctx: typer.Context,
    users: Annotated[int, typer.Option(min=1, help="Number of users to generate.")] = 2000,
    rounds: Annotated[int, typer.Option(min=1, help="Rounds (snapshot + changes).")] = 3,
) -> None:
    """The end-to-end tour: generate a GitHub workload, ingest it, print rows of the lake."""
    from lakemv.catalog.streams import checkpoint_dir
    from lakemv.duck.query import run_query
    from lakemv.flows.lakecli import generate

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
            first = python_origin(exc) or f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"
            err_console.print(error_line("internal error:", f"{first} (LAKEMV_DEBUG=1 shows the trace)"))
            code = 70
    if lifecycle.stopping():  # however the stop surfaced (an exception, or an exit code from a library)
        code = 128 + lifecycle.last_signal()
        err_console.print(f"stopped ({lifecycle.signal_name()}); work cut short is redone by the next run")
    lifecycle.finish(code)


from lakemv.flows import lakecli  # noqa: E402, F401 - its commands come after these in `lakemv --help`
