"""The `lakemv` command line: generate, ingest, query, demo. User mistakes end as one red line."""

from __future__ import annotations

import os
import shutil
import sys
import time
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from catalog.declarations import SourceRegistry, load_sources
from catalog.errors import ConfigError, LakemvError
from catalog.settings import LakeSettings
from flows.console import console, err_console, render

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


class Context:
    """What every command needs: validated settings and the declared sources."""

    def __init__(self, settings: LakeSettings):
        self.settings = settings
        self._sources: SourceRegistry | None = None

    @property
    def sources(self) -> SourceRegistry:
        if self._sources is None:
            self._sources = load_sources(self.settings.sources_dirs)
        return self._sources

    def spark(self):  # noqa: ANN201 - pyspark imported lazily: commands without Spark start fast
        from spark.session import get_spark

        with console.status("starting Spark..."):
            return get_spark(self.settings)


@app.callback()
def main_options(
    ctx: typer.Context,
    warehouse: Annotated[
        Path | None, typer.Option(help="Warehouse folder (env LAKEMV_WAREHOUSE).", show_default="./warehouse")
    ] = None,
) -> None:
    try:
        settings = LakeSettings(warehouse=warehouse) if warehouse else LakeSettings()
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(first["msg"], "LAKEMV_" + str(first["loc"][0]).upper()) from None
    ctx.obj = Context(settings)


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
    from workload.github import WorkloadConfig, generate_files

    started = time.perf_counter()
    config = WorkloadConfig(users=users, seed=seed, rounds=rounds, changes_per_round=changes_per_round)
    workload, events, files = generate_files(config, ctx.obj.sources, out)
    live = ", ".join(f"{t} {len(r)}" for t, r in workload.state.items())
    console.print(f"wrote {events} events in {files} files to {out} ({time.perf_counter() - started:.1f}s); live rows: {live}")


@app.command()
def ingest(
    ctx: typer.Context,
    landing: Annotated[Path, typer.Option(help="Landing directory: <landing>/<table>/*.json.")],
    once: Annotated[bool, typer.Option("--once", help="Process what is there now, then exit.")] = False,
    trigger_seconds: Annotated[float, typer.Option(min=0.1, help="Seconds between batches when continuous.")] = 2.0,
    max_files_per_trigger: Annotated[int | None, typer.Option(min=1, help="Backpressure: files per batch.")] = None,
) -> None:
    """Stream landing files into the mirror tables (continuous unless --once)."""
    from spark.ingest import run_ingest

    if not landing.is_dir():
        raise ConfigError("landing directory does not exist", str(landing))
    sources = ctx.obj.sources
    spark = ctx.obj.spark()
    result = run_ingest(
        spark,
        ctx.obj.settings,
        sources,
        landing,
        once=once,
        trigger_seconds=trigger_seconds,
        max_files_per_trigger=max_files_per_trigger,
        on_batch=lambda batch: console.print(batch.describe()),
    )
    rate = result.events / result.seconds if result.seconds else 0.0
    console.print(
        f"ingested {result.events} events in {len(result.batches)} batches, {result.seconds:.1f}s "
        f"({rate:,.0f} events/s); {result.dead_letters} dead letters"
    )


@app.command()
def query(
    ctx: typer.Context,
    sql: Annotated[str, typer.Argument(help="DuckDB SQL; tables by plain name (users, repos, ...).")],
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,  # noqa: A002
) -> None:
    """Query the lake with DuckDB: live rows only, no bookkeeping columns."""
    from catalog.duck import run_query

    output = render(run_query(ctx.obj.settings, ctx.obj.sources, sql), format.value)
    if output:
        print(output)  # already rendered; printing through rich again would read data as markup


@app.command()
def demo(
    ctx: typer.Context,
    users: Annotated[int, typer.Option(min=1, help="Number of users to generate.")] = 2000,
    rounds: Annotated[int, typer.Option(min=1, help="Rounds (snapshot + changes).")] = 3,
) -> None:
    """The end-to-end tour: generate a GitHub workload, ingest it, print rows of the lake."""
    from catalog.duck import run_query
    from spark.ingest import checkpoint_dir

    settings = ctx.obj.settings
    landing = settings.warehouse / "demo-landing"
    shutil.rmtree(landing, ignore_errors=True)
    shutil.rmtree(checkpoint_dir(settings, landing), ignore_errors=True)
    console.rule("1. generate")
    ctx.invoke(generate, ctx=ctx, out=landing, users=users, seed=42, rounds=rounds, changes_per_round=None)
    console.rule("2. ingest")
    ctx.invoke(ingest, ctx=ctx, landing=landing, once=True, trigger_seconds=2.0, max_files_per_trigger=5)
    console.rule("3. query the lake (DuckDB)")
    for table in ctx.obj.sources:
        count = run_query(settings, ctx.obj.sources, f'SELECT count(*) AS n FROM "{table}"').column("n")[0].as_py()
        console.print(f"[bold]{table}[/bold]: {count} live rows")
        print(render(run_query(settings, ctx.obj.sources, f'SELECT * FROM "{table}" LIMIT 3'), "table"))
    console.print("try: lakemv query \"select username, count(*) from pull_requests p join users u on p.author = u.username group by 1 order by 2 desc limit 5\"")


def main() -> None:
    """Entry point: run the app; LakemvError and usage mistakes print one line, never a trace."""
    try:
        code = app(standalone_mode=False)
    except LakemvError as exc:
        err_console.print(f"[red]error:[/red] {exc}")
        sys.exit(1)
    except typer.TyperException as exc:  # usage mistakes (typer vendors click's exceptions)
        ctx = getattr(exc, "ctx", None)
        hint = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        err_console.print(f"[red]error:[/red] {message}{hint}")
        sys.exit(getattr(exc, "exit_code", 2))
    except (KeyboardInterrupt, typer.Abort):
        err_console.print("interrupted")
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - last resort: one line unless debugging
        if os.environ.get("LAKEMV_DEBUG"):
            raise
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        err_console.print(f"[red]internal error:[/red] {type(exc).__name__}: {first} (LAKEMV_DEBUG=1 shows the trace)")
        sys.exit(70)
    sys.exit(code if isinstance(code, int) else 0)
