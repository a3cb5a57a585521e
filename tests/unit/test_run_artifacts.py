"""What a flow run reports as Prefect artifacts, and the views' freshness it charts (pure parts)."""

from __future__ import annotations

import base64
import json
import xml.etree.ElementTree as ET

from pyspark.sql.streaming.listener import StreamingQueryProgress

from lakemv.core.batch.freshness import Freshness, LedgerRow, view_freshness
from lakemv.core.batch.result import BatchResult, ViewResult
from lakemv.flows.artifacts import (
    artifact_key,
    backfill_artifacts,
    cell,
    compact_artifacts,
    freshness_chart,
    seconds,
    ingest_artifacts,
    source_rows,
    tally_views,
    verify_artifacts,
)
from lakemv.spark.stream.kafka import kafka_lag

READS = {"profile": ("users", "stars"), "summary": ("repos",), "slow": ("users",)}


def _row(at: float, tables: dict[str, float | None], views: set[str] = frozenset()) -> LedgerRow:
    return LedgerRow(at, tables, frozenset(views))


def test_a_view_maintained_every_batch_lags_by_its_batches_latency_and_an_idle_source_is_not_stale():
    rows = [_row(100, {"users": 97}), _row(200, {"repos": 190}), _row(300, {"stars": 299.5})]
    fresh = view_freshness(rows, READS, {}, now=5000, since=0)
    assert fresh["profile"].points == ((100, 3), (300, 0.5))  # the repos batch showed it nothing
    assert fresh["profile"].lag == 0.0  # long after its last change: nothing waits
    assert fresh["summary"].points == ((200, 10),)
    assert not fresh["profile"].behind and fresh["profile"].budget is None


def test_a_view_with_a_budget_lags_from_the_oldest_change_waiting_until_a_batch_maintains_it():
    rows = [_row(100, {"users": 99}), _row(130, {"users": 128}), _row(170, {"users": 169}, {"slow"}), _row(200, {"users": 199})]
    fresh = view_freshness(rows, READS, {"slow": 60.0}, now=230, since=0)["slow"]
    assert fresh.points == ((170, 71),)  # the change of t=99 waited until the batch of t=170
    assert fresh.lag == 31  # the change of t=199 waits now
    assert fresh.behind and fresh.worst == 71  # 71 s against a 60 s budget


def test_a_change_that_waited_since_before_the_window_counts_but_earlier_points_do_not():
    rows = [_row(50, {"users": 49}, {"slow"}), _row(90, {"users": 80}), _row(120, {"users": 119}, {"slow"})]
    fresh = view_freshness(rows, READS, {"slow": 60.0}, now=130, since=100)["slow"]
    assert fresh.points == ((120, 40),)
    assert fresh.lag == 0.0 and not fresh.behind


def test_durations_read_at_a_glance():
    assert [seconds(v) for v in (None, 0.04, 9.94, 12.4, 200, 3600, 7500, 41 * 86400 + 3 * 3600 + 5)] == [
        "—", "0.0s", "9.9s", "12s", "3m 20s", "1h", "2h 5m", "41d 3h"
    ]  # fmt: skip


def test_keys_are_what_prefect_accepts():
    assert artifact_key("ingest", "user_profile") == "ingest-user-profile"
    assert artifact_key("cli-ingest") == "cli-ingest"
    assert artifact_key("verify", "TPCH.Q01__x") == "verify-tpch-q01-x"


def test_user_text_stays_inside_one_table_cell():
    assert cell("a | b\nc <img src=x>") == "a \\| b c &lt;img src=x>"
    assert cell(None) == ""


def _batch(batch_id: int, views: dict[str, ViewResult], merged=None, letters=None, dead=0) -> BatchResult:
    return BatchResult(batch_id, 10, 10, merged=merged or {}, views=views, letters=letters or {}, dead_letters=dead, seconds=1.5)


def test_a_runs_batches_are_tallied_per_view_with_how_and_why():
    batches = [
        _batch(1, {"profile": ViewResult("profile", 40, 38, 1, 0.25, plan="incremental", reason="incremental ~0.26s < any whole recompute")}),
        _batch(2, {"profile": ViewResult("profile", None, 5, 0, 0.75, plan="whole", reason="whole ~0.8s < incremental ~2s"),
                   "slow": ViewResult("slow", 7, deferred=True, note="due in 30s")}),
    ]  # fmt: skip
    tallies = tally_views(batches)
    profile = tallies["profile"]
    assert (profile.keys, profile.upserts, profile.deletes, dict(profile.ways)) == (40, 43, 1, {"incremental": 1, "whole": 1})
    assert profile.reason == "whole ~0.8s < incremental ~2s" and profile.seconds == 1.0
    assert [b["keys reached"] for b in profile.batches] == [40, "all"]
    assert tallies["slow"].deferred == 1 and not tallies["slow"].batches


def test_sources_report_changes_dead_letters_and_kafka_lag_with_unattributed_letters_apart():
    batches = [_batch(1, {}, {"users": 5, "stars": 2}, {"users": 1, "": 2}, 3), _batch(2, {}, {"users": 1}, {"stars": 4}, 4)]
    rows = {r["source"]: r for r in source_rows(batches, {"users": 12, "stars": 0}, ["users", "stars", "repos"])}
    assert rows["users"] == {"source": "users", "changes applied": 6, "dead letters": 1, "behind (records)": 12}
    assert rows["stars"]["dead letters"] == 4 and rows["repos"]["changes applied"] == 0 and rows["repos"]["behind (records)"] is None
    assert rows["(no declared table)"]["dead letters"] == 2


def test_an_ingest_run_has_a_summary_tables_and_a_part_per_view_it_maintained():
    batches = [_batch(3, {"profile": ViewResult("profile", 4, 4, 0, 0.2, plan="incremental", reason="cheaper")}, {"users": 4})]
    fresh = {
        "profile": Freshness("profile", None, ((1000.0, 2.0),), 0.0),
        "slow": Freshness("slow", 60.0, ((1100.0, 90.0),), 10.0),
    }
    found = {a.key: a for a in ingest_artifacts("lakemv-ingest", batches, {}, ["users"], fresh, (0.0, 3600.0))}
    assert set(found) == {"lakemv-ingest", "lakemv-ingest-views", "lakemv-ingest-sources", "ingest-profile"}
    summary = found["lakemv-ingest"].data
    assert "# Ingest: 10 events in 1 batches" in summary
    assert "[profile](/artifacts/key/ingest-profile)" in summary and "[slow](/artifacts/key/ingest-slow)" in summary
    assert "**Over their freshness budget in the last hour:** slow" in summary
    assert "⚠ 10s now, worst 1m 30s / 1m budget" in summary
    views = {r["view"]: r for r in json.loads(found["lakemv-ingest-views"].data)}
    assert views["profile"]["keys reached"] == 4 and views["profile"]["how (batches)"] == "1 incremental"
    assert views["slow"]["over budget"] is True and views["slow"]["how (batches)"] == "not reached"
    assert "| 3 | 4 | 4 | 0 | incremental | cheaper |" in found["ingest-profile"].data


def _bars(uri: str) -> list[ET.Element]:
    assert uri.startswith("data:image/svg+xml;base64,")
    svg = ET.fromstring(base64.b64decode(uri.split(",", 1)[1]))
    return [r for r in svg.iter("{http://www.w3.org/2000/svg}rect")][1:]  # (the first is the background)


def test_the_chart_has_a_bar_per_slice_with_a_batch_red_over_budget():
    fresh = Freshness("slow", 60.0, ((10.0, 30.0), (1850.0, 90.0)), 0.0)
    bars = _bars(freshness_chart(fresh, 0.0, 3600.0, buckets=30))
    assert [b.get("fill") for b in bars] == ["#43a047", "#d32f2f", "#43a047"]  # two batches, then now
    assert float(bars[1].get("height")) > float(bars[0].get("height"))


def test_verify_compact_and_backfill_runs_say_what_they_did():
    results = {
        "profile": {"matching": 9, "mismatching": 1, "missing": 0, "extra": 2, "duplicate_keys": 0},
        "summary": {"matching": 5, "mismatching": 0, "missing": 0, "extra": 0, "duplicate_keys": 0},
        "events": {"skipped": "enriched as of processing time"},
    }
    found = {a.key: a for a in verify_artifacts("lakemv-verify", results)}
    assert set(found) == {"lakemv-verify", "lakemv-verify-views", "verify-profile", "verify-summary", "verify-events"}
    assert "**1 differ**: profile" in found["lakemv-verify"].data
    assert json.loads(found["verify-profile"].data)[0] | {} == {
        "view": "profile", "outcome": "❌ differs", "matched": 9, "mismatched": 1, "missing": 0, "extra": 2, "note": ""
    }  # fmt: skip
    tables = [{"table": "mirror.users", "data_files_before": 9, "data_files_after": 1, "delete_files_before": 3, "delete_files_after": 0,
               "snapshots_before": 12, "snapshots_after": 5, "bytes_before": 2048, "bytes_after": 1024, "seconds": 1.234}]  # fmt: skip
    compacted = {a.key: a for a in compact_artifacts("lakemv-compact", tables)}
    assert "| mirror.users | 9 → 1 | 3 → 0 | 12 → 5 | 2,048 → 1,024 | 1.23 |" in compacted["lakemv-compact"].data
    steps = [{"step": "pause", "outcome": "paused", "seconds": 0.1}, {"step": "audit", "outcome": "failed: 2 rows differ", "seconds": 3.0}]
    filled = {a.key: a for a in backfill_artifacts("cli-backfill", "user_profile", steps, "failed")}
    assert set(filled) == {"cli-backfill", "backfill-user-profile"}
    assert "# Backfill of user_profile: failed" in filled["cli-backfill"].data and "| audit | failed: 2 rows differ | 3.0 |" in filled["cli-backfill"].data


def test_kafka_lag_is_latest_minus_end_offsets_per_table_without_the_transaction_topic():
    source = {
        "description": "KafkaV2[SubscribePattern[...]]", "startOffset": None, "numInputRows": 5, "inputRowsPerSecond": 0.0,
        "processedRowsPerSecond": 0.0, "metrics": {},
        "endOffset": {"db.public.users": {"0": 40, "1": 7}, "db.transaction": {"0": 3}},  # (objects, as Spark's JSON has them)
        "latestOffset": {"db.public.users": {"0": 45, "1": 7}, "db.public.stars": {"0": 2}, "db.transaction": {"0": 9}},
    }  # fmt: skip
    progress = StreamingQueryProgress.fromJson({
        "id": "00000000-0000-0000-0000-000000000000", "runId": "00000000-0000-0000-0000-000000000001", "name": "q",
        "timestamp": "2026-12-04T00:00:00.000Z", "batchId": 3, "batchDuration": 10, "durationMs": {}, "eventTime": {},
        "stateOperators": [], "sources": [source], "sink": {"description": "ForeachBatchSink", "numOutputRows": -1, "metrics": {}},
        "numInputRows": 5, "inputRowsPerSecond": 0.0, "processedRowsPerSecond": 0.0, "observedMetrics": {},
    })  # fmt: skip
    assert kafka_lag(progress, {"db.public.users": "users", "db.public.stars": "stars", "db.public.repos": "repos"}) == {
        "users": 5, "stars": 2, "repos": 0
    }  # fmt: skip
