"""`lakemv stack up|down|status|generate|env`: the real CDC stack on loopback (`lakemv.ops.stack`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from lakemv.core.errors import ConfigError
from lakemv.flows.console import console

stack_app = typer.Typer(
    no_args_is_help=True,
    help="A local PostgreSQL → Debezium → Kafka stack, as processes on loopback (no Docker).",
)

Folder = Annotated[Path | None, typer.Option("--dir", help="The stack's folder (env LAKEMV_STACK_DIR).", show_default=".stack")]


def _stack(ctx: typer.Context, folder: Path | None):  # noqa: ANN202 - lakemv.ops.stack.Stack
    from lakemv.ops.stack import Stack, StackConfig

    return Stack(StackConfig.load(folder or ctx.obj.settings.stack_dir))


def _existing(ctx: typer.Context, folder: Path | None):  # noqa: ANN202 - lakemv.ops.stack.Stack
    """The stack in the folder; a ConfigError when none was started there."""
    stack = _stack(ctx, folder)
    if not (stack.folder / "stack.json").exists():
        raise ConfigError(f"no stack in {stack.folder}: start one with `lakemv stack up`")
    return stack


def _show(status) -> None:  # noqa: ANN001 - lakemv.ops.services.ServicesStatus
    console.print(status.table())


@stack_app.command()
def up(
    ctx: typer.Context,
    folder: Folder = None,
    topic_prefix: Annotated[str | None, typer.Option(help="Debezium's topic.prefix (first up only).")] = None,
    transactions: Annotated[
        bool, typer.Option(help="Debezium's transaction metadata, for views that apply whole transactions (first up only).")
    ] = True,
) -> None:
    """Start PostgreSQL, Kafka and Kafka Connect with Debezium (whatever is not running yet)."""
    stack = _stack(ctx, folder)
    if not (stack.folder / "stack.json").exists():
        stack.config.topic_prefix = topic_prefix or ctx.obj.settings.kafka_topic_prefix
        stack.config.transaction_metadata = transactions
    with console.status("starting PostgreSQL, Kafka and Kafka Connect..."):
        status = stack.up(ctx.obj.sources)
    _show(status)
    c = stack.config
    console.print(
        f"next: [bold]lakemv stack generate --users 1000[/] (the workload as SQL), then "
        f"[bold]lakemv ingest --kafka {c.bootstrap}[/] (topics {c.topic_prefix}.public.<table>)"
    )


@stack_app.command()
def down(
    ctx: typer.Context,
    folder: Folder = None,
    purge: Annotated[bool, typer.Option("--purge", help="Also drop the replication slot and delete every file.")] = False,
) -> None:
    """Stop Kafka Connect, Kafka and PostgreSQL (their data is kept for the next `up` unless --purge)."""
    stack = _stack(ctx, folder)
    with console.status("stopping..."):
        stack.down(purge=purge)
    console.print("stack stopped" + (" and removed" if purge else f"; its data stays in {escape(str(stack.folder))}"))


@stack_app.command()
def status(ctx: typer.Context, folder: Folder = None) -> None:
    """Show each component: running or not, its process and address, the connector's state."""
    stack = _existing(ctx, folder)
    result = stack.status()
    _show(result)
    if not result.running:
        raise typer.Exit(1)


@stack_app.command()
def generate(
    ctx: typer.Context,
    folder: Folder = None,
    users: Annotated[int, typer.Option(min=1, help="Users of the initial contents (scale).")] = 1000,
    changes: Annotated[int, typer.Option(min=0, help="Random operations after the initial contents.")] = 1000,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 42,
    snapshot: Annotated[bool, typer.Option(help="Insert the initial contents first (off: changes only).")] = True,
) -> None:
    """Run the GitHub workload as SQL against the stack's PostgreSQL: inserts, updates, deletes,
    primary-key updates, in transactions that span tables. Debezium captures them."""
    import psycopg2

    from lakemv.workload.github import WorkloadConfig
    from lakemv.workload.postgres import PostgresWorkload, apply, load_state

    stack = _existing(ctx, folder)
    sources = {n: s for n, s in ctx.obj.sources.items() if n in stack.config.tables}
    workload = PostgresWorkload(WorkloadConfig(users=users, seed=seed), sources)
    con = psycopg2.connect(stack.config.postgres_url)
    try:
        if not snapshot:
            load_state(con, workload)
        with console.status("writing to PostgreSQL..."):
            statements = apply(con, workload.snapshot()) if snapshot else 0
            statements += apply(con, workload.transactions(changes))
    finally:
        con.close()
    console.print(f"ran {statements:,} statements against {escape(stack.config.postgres_url)}")


@stack_app.command()
def env(ctx: typer.Context, folder: Folder = None) -> None:
    """Print the settings that point lakemv at the stack: `eval "$(lakemv stack env)"`."""
    from lakemv.ops.stack import USER

    c = _existing(ctx, folder).config
    typer.echo(f"export LAKEMV_KAFKA_BOOTSTRAP={c.bootstrap}\nexport LAKEMV_KAFKA_TOPIC_PREFIX={c.topic_prefix}")
    # libpq's own variables: `psql` (and any PostgreSQL client) reaches the stack's database as they are
    typer.echo(f"# PostgreSQL: {c.postgres_url}")
    typer.echo(f"export PGHOST=127.0.0.1\nexport PGPORT={c.postgres_port}\nexport PGDATABASE={c.database}\nexport PGUSER={USER}")
