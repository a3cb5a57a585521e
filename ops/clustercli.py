"""`lakemv cluster up|down|status|env`: the scale-out stack on loopback (`lakemv.ops.cluster`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from lakemv.core.errors import ConfigError
from lakemv.flows.console import console

cluster_app = typer.Typer(
    no_args_is_help=True,
    help="A local S3 object store, Iceberg REST catalog and Spark standalone cluster, as processes on loopback (no Docker).",
)

Folder = Annotated[Path | None, typer.Option("--dir", help="The cluster's folder (env LAKEMV_CLUSTER_DIR).", show_default=".cluster")]


def _cluster(ctx: typer.Context, folder: Path | None):  # noqa: ANN202 - lakemv.ops.cluster.Cluster
    from lakemv.ops.cluster import Cluster, ClusterConfig

    return Cluster(ClusterConfig.load(folder or ctx.obj.settings.cluster_dir))


def _existing(ctx: typer.Context, folder: Path | None):  # noqa: ANN202 - lakemv.ops.cluster.Cluster
    """The cluster in the folder; a ConfigError when none was started there."""
    cluster = _cluster(ctx, folder)
    if not (cluster.folder / "cluster.json").exists():
        raise ConfigError(f"no cluster in {cluster.folder}: start one with `lakemv cluster up`")
    return cluster


def _show(status) -> None:  # noqa: ANN001 - lakemv.ops.services.ServicesStatus
    console.print(status.table())


@cluster_app.command()
def up(
    ctx: typer.Context,
    folder: Folder = None,
    workers: Annotated[int | None, typer.Option(min=1, help="Spark workers (first up only).")] = None,
    worker_cores: Annotated[int | None, typer.Option(min=1, help="Cores per worker (first up only).")] = None,
    worker_memory: Annotated[str | None, typer.Option(help="Memory per worker, e.g. 2g (first up only).")] = None,
    spark: Annotated[bool, typer.Option(help="Start the Spark master and workers (off: the object store and catalog only).")] = True,
) -> None:
    """Start the object store, the REST catalog and the Spark cluster (whatever is not running yet)."""
    if worker_memory is not None and not re.fullmatch(r"\d+[kmgt]?", worker_memory.strip(), re.IGNORECASE):
        raise ConfigError(f"expected a size such as 2g or 512m, got {worker_memory!r}", "--worker-memory")
    cluster = _cluster(ctx, folder)
    if not (cluster.folder / "cluster.json").exists():
        c = cluster.config
        c.workers = workers or c.workers
        c.worker_cores = worker_cores or c.worker_cores
        c.worker_memory = worker_memory or c.worker_memory
    with console.status("starting the object store, the REST catalog and Spark..."):
        status = cluster.up(spark=spark)
    _show(status)
    console.print(f'next: [bold]eval "$(lakemv cluster env{escape(" --dir " + str(folder)) if folder else ""})"[/], then any lakemv command runs on it')


@cluster_app.command()
def down(
    ctx: typer.Context,
    folder: Folder = None,
    purge: Annotated[bool, typer.Option("--purge", help="Also delete every file: the bucket, the catalog, the logs.")] = False,
) -> None:
    """Stop the Spark workers and master, the REST catalog and the object store (data kept unless --purge)."""
    cluster = _cluster(ctx, folder)
    with console.status("stopping..."):
        cluster.down(purge=purge)
    console.print("cluster stopped" + (" and removed" if purge else f"; its data stays in {escape(str(cluster.folder))}"))


@cluster_app.command()
def status(ctx: typer.Context, folder: Folder = None) -> None:
    """Show each component: running or not, its process and address."""
    cluster = _existing(ctx, folder)
    result = cluster.status()
    _show(result)
    if not result.running:
        raise typer.Exit(1)


@cluster_app.command()
def env(
    ctx: typer.Context,
    folder: Folder = None,
    spark: Annotated[bool, typer.Option(help="Point Spark at the cluster (off: the driver's own threads).")] = True,
) -> None:
    """Print the settings that point lakemv at the cluster: `eval "$(lakemv cluster env)"`."""
    cluster = _existing(ctx, folder)
    typer.echo("\n".join(f"export {k}={v}" for k, v in cluster.config.settings_env(spark=spark).items()))
