"""The one retry policy for transient failures (`lakemv.core.failures`): lost commit races, a busy
catalog. A unit of work retries an idempotent action with backoff and counts what it retried (reported
in batch results and the ledger); the Prefect tasks retry on the same classification
(`lakemv.flows.retries`).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from lakemv.core.errors import CommitConflict
from lakemv.core.failures import classify

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass
class RetryPolicy:
    """Backoff for transient failures: `attempts` tries, waits growing from `base` to `cap` seconds."""

    attempts: int = 8
    base: float = 0.25
    cap: float = 8.0

    def wait(self, attempt: int) -> float:
        return min(self.cap, self.base * 2**attempt) * random.uniform(0.5, 1.0)


@dataclass
class Retries:
    """Counts the transient failures retried by one unit of work."""

    count: int = 0

    def run(self, what: str, action: Callable[[], T], policy: RetryPolicy | None = None) -> T:
        """Run `action`; on a transient failure wait and run it again. The action must be idempotent."""
        policy = policy or RetryPolicy()
        for attempt in range(policy.attempts):
            try:
                return action()
            except Exception as exc:
                failure = classify(exc)
                if failure.kind != "transient":
                    raise
                if attempt == policy.attempts - 1:
                    raise CommitConflict(f"{what}: still conflicting after {policy.attempts} attempts: {failure.line}") from None
                self.count += 1
                pause = policy.wait(attempt)
                log.info("%s lost a commit race (%s); retrying in %.2fs", what, failure.line, pause)
                time.sleep(pause)
        raise AssertionError("unreachable")
