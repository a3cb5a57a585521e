"""What Spark's own event log says a bench step cost: per job description (a bench sets one per step),
the jobs, stages and tasks it ran, their summed run and CPU time, GC time, and the longest task (a
skewed partition shows as a longest task near the stage's wall).

A bench turns the log on with `conf(dir)` in the session's settings and reads it back with
`summary(dir)` after the session stops (or after its steps: the log is flushed as it goes)."""

from __future__ import annotations

import collections
import json
from pathlib import Path


def conf(folder: Path) -> dict[str, str]:
    """The session settings that write an uncompressed event log under `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    return {"spark.eventLog.enabled": "true", "spark.eventLog.dir": folder.resolve().as_uri(), "spark.eventLog.compress": "false"}


def _events(folder: Path):
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")):  # a rolling log is a folder of files
        with path.open() as lines:
            for line in lines:
                yield json.loads(line)


def summary(folder: Path) -> dict[str, dict]:
    """Per job description: jobs, stages, tasks, wall of its stages (s, summed), task run / CPU / GC time
    (s, summed over tasks; and the CPU of deserializing tasks), the longest task (s), the bytes shuffled out and the records shuffled in."""
    job_of_stage: dict[int, str] = {}
    out: dict[str, dict] = collections.defaultdict(
        lambda: {
            "jobs": 0,
            "stages": 0,
            "tasks": 0,
            "stage_wall_s": 0.0,
            "run_s": 0.0,
            "cpu_s": 0.0,
            "deserialize_cpu_s": 0.0,
            "gc_s": 0.0,
            "longest_task_s": 0.0,
            "shuffle_write_bytes": 0,
            "shuffle_read_records": 0,
        }
    )
    for event in _events(folder):
        kind = event.get("Event")
        if kind == "SparkListenerJobStart":
            name = (event.get("Properties") or {}).get("spark.job.description") or "(none)"
            out[name]["jobs"] += 1
            for stage in event.get("Stage IDs", []):
                job_of_stage[stage] = name
        elif kind == "SparkListenerTaskEnd":
            name = job_of_stage.get(event["Stage ID"], "(none)")
            metrics = event.get("Task Metrics") or {}
            step = out[name]
            step["tasks"] += 1
            run = metrics.get("Executor Run Time", 0) / 1e3
            step["run_s"] += run
            step["cpu_s"] += metrics.get("Executor CPU Time", 0) / 1e9
            step["deserialize_cpu_s"] += metrics.get("Executor Deserialize CPU Time", 0) / 1e9  # the task's lineage read
            step["gc_s"] += metrics.get("JVM GC Time", 0) / 1e3
            step["longest_task_s"] = max(step["longest_task_s"], run)
            step["shuffle_write_bytes"] += (metrics.get("Shuffle Write Metrics") or {}).get("Shuffle Bytes Written", 0)
            step["shuffle_read_records"] += (metrics.get("Shuffle Read Metrics") or {}).get("Total Records Read", 0)
        elif kind == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            name = job_of_stage.get(info["Stage ID"], "(none)")
            if "Completion Time" in info and "Submission Time" in info:
                out[name]["stages"] += 1
                out[name]["stage_wall_s"] += (info["Completion Time"] - info["Submission Time"]) / 1e3
    return {name: {k: round(v, 3) if isinstance(v, float) else v for k, v in step.items()} for name, step in out.items()}
