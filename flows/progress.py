"""Where a flow's progress goes: Prefect's run logger always, and the terminal when the CLI runs it.

Flows never print. They call `report`; inside a flow run the messages reach Prefect's run logger
(the UI and the API), and when the `lakemv` CLI runs the flow it also attaches a rich console, so the
same message shows as a line, a spinner or a progress bar.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

_terminal: Console | None = None
_bound: logging.Logger | logging.LoggerAdapter | None = None  # the run logger, for threads without the run context


@contextmanager
def terminal(console: Console) -> Iterator[None]:
    """While inside, flow progress is also shown on `console` (the CLI's)."""
    global _terminal
    previous, _terminal = _terminal, console
    try:
        yield
    finally:
        _terminal = previous


def _logger() -> logging.Logger | logging.LoggerAdapter:
    from prefect.exceptions import MissingContextError
    from prefect.logging import get_run_logger

    try:
        return get_run_logger()
    except MissingContextError:  # another thread (Spark's foreachBatch callback), or outside a flow run
        return _bound or logging.getLogger("lakemv")


@dataclass
class Steps:
    """A progress bar over a known number of steps (the CLI's), mirrored as log lines."""

    progress: Progress | None
    task: int | None

    def advance(self, description: str) -> None:
        _logger().info(description)
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, advance=1, description=description)


class Report:
    """A flow's voice: `info` lines, `status` spinners and `steps` progress bars."""

    @contextmanager
    def bound(self) -> Iterator[None]:
        """Within a flow run: let threads started inside (Spark callbacks) log to this run too."""
        global _bound
        previous, _bound = _bound, _logger()
        try:
            yield
        finally:
            _bound = previous

    def info(self, message: str, style: str | None = None) -> None:
        level = logging.WARNING if style in ("red", "yellow") else logging.INFO
        _logger().log(level, message)
        if _terminal is not None:
            _terminal.print(Text(message, style=style or ""))  # data, never read as markup

    def status(self, message: str):  # noqa: ANN201 - a context manager
        """A spinner while a long step runs (logged once at its start)."""
        _logger().info(message)
        return _terminal.status(message) if _terminal is not None else nullcontext()

    @contextmanager
    def steps(self, total: int, description: str) -> Iterator[Steps]:
        """A bar of `total` steps; each `advance` logs its description."""
        _logger().info(description)
        if _terminal is None:
            yield Steps(None, None)
            return
        columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=_terminal, transient=False) as progress:
            yield Steps(progress, progress.add_task(description, total=total))


report = Report()
