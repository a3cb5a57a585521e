"""The bench's judgement of a run (steady latencies, a ramp's highest sustained rate) and its report of
the figures a run records: pure functions over results, no Spark."""

import pytest

from bench.report import markdown, summary
from bench.suite import TARGETS, steady


def _results(*scales: dict) -> dict:
    return {"targets": TARGETS, "scales": list(scales), "started": "s", "finished": "f", "command": "c",
            "machine": {"cpus": 2, "cpu_model": "x", "memory_gib": 24, "python": "3", "spark": "4", "duckdb": "1", "os": "linux"}}  # fmt: skip


def test_latencies_that_grow_over_a_run_are_not_steady():
    assert steady([(t, 2.0 + (t % 3) * 0.1) for t in range(30)])
    assert not steady([(t, 1.0 + t) for t in range(30)])  # each file waits longer: a backlog builds
    assert steady([(0, 1.0), (1, 50.0)])  # too few to judge


def _scale(users: int) -> dict:
    freshness = {
        "rate": 2000, "offered_events_per_second": 2001.0, "seconds": 600.0, "events_measured": 1_200_000, "events_not_visible": 0,
        "p50_seconds": 2.5, "p99_seconds": 7.0, "max_seconds": 9.0, "batch_p50_seconds": 1.1, "batch_p99_seconds": 3.4, "steady": False,
        "batches": [{"events": 1000}], "file_latencies": [(1.0, 2.0, 10, 0)],
    }  # fmt: skip
    catch_up = {"events": 100_000, "seconds": 10.0, "events_per_second": 10_000, "units": [{}], "cpu_seconds": 15.0,
                "ready_seconds": 4.0, "unit_p50_seconds": 4.0, "unit_p99_seconds": 6.0}  # fmt: skip
    return {
        "users": users,
        "setup": {"snapshot_events": 1000, "load_seconds": 1.0, "mirror_rows": {"users": 10}, "view_rows": 10, "build": {"seconds": 1.0}},
        "batches": None, "full_recompute": None, "freshness": [freshness], "single_changes": None, "startup": {"runs": [{"to_first_batch_seconds": 7.5, "seconds": 12.0, "peak_python_mib": 400, "peak_jvm_mib": 1500},
                                                     {"to_first_batch_seconds": 7.0, "seconds": 11.0, "peak_python_mib": 420, "peak_jvm_mib": 1600}],
                                            "median_to_first_batch_seconds": 7.25},
        "sustain": {"highest_sustained_events_per_second": 2250, "step_seconds": 60.0,
                    "steps": [{"rate": 1000, "p99_seconds": 2.0, "sustained": True}, {"rate": 2250, "p99_seconds": 8.0, "sustained": True},
                              {"rate": 3375, "p99_seconds": 30.0, "sustained": False}]},
        "catch_up": catch_up, "catch_up_rebuilt": {**catch_up, "events_per_second": 8_000, "ready_seconds": 12.0},
        "errors": {"cost": "RuntimeError: the cost measure failed:\ninternal error: it broke"},
        "driver_memory": {"python_peak_bytes": 2 * 2**30, "jvm_peak_bytes": 3 * 2**30, "jvm_heap_used_bytes": 2**30,
                          "jvm_heap_max_bytes": 4 * 2**30},
    }  # fmt: skip


def test_the_report_shows_the_sustained_rate_both_catch_ups_batch_p99_and_driver_memory():
    results = _results(_scale(1_000_000))
    rows = {row["measure"]: row for row in summary(results)}
    assert rows["highest rate ingest sustains (p99 within target, not growing)"]["values"] == {"1M": 2250}
    assert rows["catch-up throughput, the local state rebuilt from the tables first (1M users)"]["values"] == {"1M": 8_000}
    assert rows["batch p99 at 2,000 events/s"]["values"] == {"1M": 3.4}
    assert rows["the suite's process, peak resident (Python, with the generated workload, + JVM)"]["values"] == {"1M": 5 * 1024}
    assert "driver memory per 1M more users" not in rows  # one scale: no slope to give
    assert rows["driver memory of `ingest --once`, peak resident (Python + JVM)"]["values"] == {"1M": 2020}
    text = markdown(results, [])
    assert "**Highest sustained: 2,250 events/s**" in text and "3,375 events/s p99 30.00 s **not**" in text
    assert "ready to drain after 12.0 s" in text and "units p50 4.00 s, p99 6.00 s" in text
    assert "| 2,000 events/s | 2,001.0 | 600 | 1,200,000 | 2.50 | 7.00 | 9.00 | **no** |" in text
    assert "peak resident 2,048 MiB (Python) + 3,072 MiB (JVM);" in text
    assert "7.50 s to the first batch (12.0 s in all; peak resident 400 MiB Python + 1,500 MiB JVM)" in text
    assert "**cost failed**: `RuntimeError: the cost measure failed: internal error: it broke`" in text  # a failed measure is reported, the others kept


def test_driver_memory_per_1m_users_is_the_growth_between_two_scales_not_a_peak_multiplied():
    small, big = _scale(100_000), _scale(1_000_000)
    small["driver_memory"] = {**small["driver_memory"], "python_peak_bytes": 1 * 2**30, "jvm_peak_bytes": 3 * 2**30}  # 4 GiB
    big["driver_memory"] = {**big["driver_memory"], "python_peak_bytes": 2 * 2**30, "jvm_peak_bytes": 3 * 2**30 + 2**29}  # 5.5 GiB
    results = _results(small, big)
    rows = {row["measure"]: row for row in summary(results)}
    assert rows["the suite's process, peak resident (Python, with the generated workload, + JVM)"]["values"] == {"100k": 4 * 1024, "1M": 5.5 * 1024}
    assert rows["driver memory per 1M more users"]["values"] == {"100k→1M": pytest.approx(1.5 * 1024 / 0.9)}


def test_targets_issue_31_sets_per_scale_judge_each_scale_by_its_own():
    small, big = _scale(100_000), _scale(1_000_000)
    small["catch_up"] = {**small["catch_up"], "events_per_second": 30_000}  # under 100k's 50k
    big["catch_up"] = {**big["catch_up"], "events_per_second": 30_000}  # over 1M's 25k
    for scale, batch, duckdb in ((small, 1.0, 4.0), (big, 2.0, 16.0)):  # 4x (>= 3x at 100k), 8x (< 10x at 1M)
        scale["batches"] = {"median_one_k": {"seconds": batch, "cpu_seconds": batch}, "empty": {"seconds": 0.1},
                            "fan_out": {"seconds": 1.0}}  # fmt: skip
        scale["full_recompute"] = {"spark_best": {"seconds": duckdb, "cpu_seconds": duckdb}, "duckdb_best": {"seconds": duckdb}}
    results = _results(small, big)
    rows = {row["measure"]: row for row in summary(results)}
    assert (rows["catch-up throughput (100k users)"]["target"], rows["catch-up throughput (100k users)"]["met"]) == ("≥ 50,000 events/s", False)
    assert (rows["catch-up throughput (1M users)"]["target"], rows["catch-up throughput (1M users)"]["met"]) == ("≥ 25,000 events/s", True)
    faster = {users: rows[f"1k-change batch vs DuckDB full recompute, wall ({users} users)"] for users in ("100k", "1M")}
    assert (faster["100k"]["target"], faster["100k"]["met"]) == ("≥ 3× faster", True)
    assert (faster["1M"]["target"], faster["1M"]["met"]) == ("≥ 10× faster", False)
    # results written before the per-scale targets: the one target everywhere
    old = {k: v for k, v in TARGETS.items() if not k.endswith(("_100k", "_1m"))}
    rows = {row["measure"]: row for row in summary({**results, "targets": old})}
    assert rows["catch-up throughput (1M users)"]["target"] == "≥ 50,000 events/s"


def test_a_failed_measure_shows_its_java_cause_not_the_last_frame_kept():
    scale = {**_scale(1_000_000), "errors": {"many_views": "Py4JJavaError: An error occurred while calling o1.toDataFrame.\n"
                                             ": java.lang.OutOfMemoryError: Java heap space\n\n"
                                             '  File "bench/suite.py", line 641, in many_views\n    raise Py4JJavaError(\n',
                                             "cost": "Py4JJavaError: An error occurred while calling o2.sql.\n"
                                             ": java.lang.IllegalStateException: no table\n\tat org.apache.Foo.bar(Foo.java:1)\n"}}  # fmt: skip
    results = _results(scale)
    text = markdown(results, [])
    assert ("**many_views failed**: `Py4JJavaError: An error occurred while calling o1.toDataFrame. "
            ": java.lang.OutOfMemoryError: Java heap space`") in text  # fmt: skip
    assert "**cost failed**: `Py4JJavaError: An error occurred while calling o2.sql. : java.lang.IllegalStateException: no table`" in text
