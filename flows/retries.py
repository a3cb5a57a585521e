"""Prefect retries on the one classification of failures (`lakemv.core.failures`): a task run that
failed transiently - a lost commit race past the unit's own retries, a busy catalog - runs again; any
other failure ends it at once."""

from __future__ import annotations

from typing import Any

from lakemv.core.failures import is_transient

RETRIES = 2
RETRY_DELAY_SECONDS = [10, 30]


def transient(task: Any, task_run: Any, state: Any) -> bool:  # noqa: ARG001 - Prefect's retry_condition_fn signature
    """Prefect's `retry_condition_fn`: retry when the run's exception is transient."""
    try:
        state.result(raise_on_failure=True)
    except Exception as exc:  # noqa: BLE001 - what the failed run raised
        return is_transient(exc)
    return False
