"""The `lakemv` app: its global options, and how a command runs a Prefect flow in this process.

The commands are in `lakemv.flows.cli` (running the pipeline) and `lakemv.flows.lakecli` (looking at
the lake); `lakemv stack` and `lakemv cluster` come from `lakemv.ops`.
"""

from __future__ import annotations

import importlib
import os
from enum import Enum
from typing import Annotated

import typer

from lakemv.catalog.settings import unknown_variables
from lakemv.core.errors import ConfigError
from lakemv.core.runtime import lifecycle
from lakemv.flows.console import console, err_console, error_line
from lakemv.flows.context import Lake
from lakemv.flows.progress import terminal

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="lakemv: materialized views on an Iceberg lakehouse, fresh from Debezium change streams.",
)
PIPELINE = "Run the pipeline"
LAKE = "Look at the lake"
SERVICES = "Local services"


class Format(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


class LogFormat(str, Enum):
    text = "text"
    json = "json"


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
            if api.name is not None:  # a temporary API: it shuts down while Spark stops, not after
                lifecycle.ask_to_stop(api.name)


def _stack_commands() -> None:
    from lakemv.ops.clustercli import cluster_app
    from lakemv.ops.stackcli import stack_app

    app.add_typer(stack_app, name="stack", rich_help_panel=SERVICES)
    app.add_typer(cluster_app, name="cluster", rich_help_panel=SERVICES)


_stack_commands()
