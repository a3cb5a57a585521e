"""Where a flow's progress goes: Prefect's run logger always, and the terminal when the CLI runs it.

Flows never print. They call `report`; inside a flow run the messages reach Prefect's run logger
(the UI and the API), and when the `lakemv` CLI runs the flow it also attaches a rich console, so the
same message shows as a line, a spinner or a progress bar. In JSON lines (`lines("json")`, the
setting `log_format`), each message is one JSON object per line instead (`{"level", "message"}`; a
batch's: `record`), and no spinner or bar is drawn.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
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

    json_lines = False  # every message a JSON object (`lines`)

    @contextmanager
    def lines(self, form: str) -> Iterator[None]:
        """While inside, messages are `form`: "text" or "json" (one object per line)."""
        previous, self.json_lines = self.json_lines, form == "json"
        try:
            yield
        finally:
            self.json_lines = previous

    def _emit(self, level: int, text: str, style: str | None = None) -> None:
        _logger().log(level, text)
        if _terminal is not None:
            _terminal.print(Text(text, style=style or ""), soft_wrap=self.json_lines)  # data, never read as markup

    def record(self, kind: str, fields: Mapping[str, object], text: str) -> None:
        """A structured message: `text` as a line, or in JSON lines `{"event": kind, **fields}`."""
        if self.json_lines:
            self._emit(logging.INFO, json.dumps({"event": kind, **fields}, default=str))
        else:
            self._emit(logging.INFO, text)

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
        if self.json_lines:
            self._emit(level, json.dumps({"level": logging.getLevelName(level).lower(), "message": message}))
        else:
            self._emit(level, message, style)

    def status(self, message: str):  # noqa: ANN201 - a context manager
        """A spinner while a long step runs (logged once at its start)."""
        if self.json_lines:
            self.info(message)
            return nullcontext()
        _logger().info(message)
        return _terminal.status(message) if _terminal is not None else nullcontext()

    @contextmanager
    def steps(self, total: int, description: str) -> Iterator[Steps]:
        """A bar of `total` steps; each `advance` logs its description."""
        _logger().info(description)
        if _terminal is None or self.json_lines:
            yield Steps(None, None)
            return
        columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=_terminal, transient=False) as progress:
            yield Steps(progress, progress.add_task(description, total=total))


report = Report()
