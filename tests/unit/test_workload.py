"""The workload generator: deterministic, and it really produces the hard cases it promises."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from lakemv.workload.github import GitHubWorkload, WorkloadConfig, generate_files


def run(sources, **kwargs):
    workload = GitHubWorkload(WorkloadConfig(**kwargs), sources)
    rounds = [r for r in workload.rounds()]
    return workload, rounds


def test_same_seed_same_events_and_truth(sources):
    a, rounds_a = run(sources, users=300, seed=7, rounds=3)
    b, rounds_b = run(sources, users=300, seed=7, rounds=3)
    assert rounds_a == rounds_b and a.state == b.state
    c, rounds_c = run(sources, users=300, seed=8, rounds=3)
    assert rounds_c != rounds_a


def test_change_rounds_contain_every_hard_case(sources):
    workload, rounds = run(sources, users=500, seed=3, rounds=4)
    events = [(t, e) for r in rounds[1:] for t, es in r.items() for e in es]
    ops = Counter(e["op"] for _, e in events)
    assert ops["c"] and ops["u"] and ops["d"]
    assert all(e["op"] == "r" for es in rounds[0].values() for e in es)
    assert any(e["op"] == "u" and e["before"] is None for _, e in events)
    key_only = [e for t, e in events if e["op"] == "d" and set(e["before"]) == set(workload.sources[t].primary_key)]
    assert key_only
    lsns = Counter(e["source"]["lsn"] for r in rounds for es in r.values() for e in es)
    assert any(n > 1 for n in lsns.values()), "duplicates or replays expected"
    first_round_lsns = {e["source"]["lsn"] for es in rounds[0].values() for e in es}
    assert any(e["source"]["lsn"] in first_round_lsns for _, e in events), "replays of old events expected"
    renamed = [e for t, e in events if t == "users" and e["op"] == "u" and "~" in e["after"]["username"]]
    assert renamed, "updates of join columns expected"
    moved = [e for t, e in events if t == "users" and e["op"] == "c" and e["after"]["email"].startswith("moved")]
    assert moved, "primary-key changes expected"


def test_popularity_is_skewed(sources):
    workload, _ = run(sources, users=2000, seed=1, rounds=1)
    stars = Counter((s["repo_owner"], s["repo_name"]) for s in workload.live_rows("stars"))
    top = stars.most_common(1)[0][1]
    assert top > 20 * (sum(stars.values()) / len(stars))


def test_files_hold_wrapped_and_plain_envelopes(sources, tmp_path: Path):
    _, events, files = generate_files(WorkloadConfig(users=200, rounds=2), sources, tmp_path)
    lines = [json.loads(x) for f in tmp_path.glob("*/*.json") for x in f.read_text().splitlines()]
    assert len(lines) == events and len(list(tmp_path.glob("*/*.json"))) == files
    wrapped = sum("payload" in x for x in lines)
    assert 0 < wrapped < len(lines)
    assert not list(tmp_path.glob("*/.*")), "no temporary files left behind"


def test_a_replayed_event_of_a_table_quiet_in_its_round_is_kept(sources):
    # Seed 3 at 80 users replays an old payment_info event in a round with no other payment change.
    workload = GitHubWorkload(WorkloadConfig(users=80, seed=3, rounds=5), sources)
    rounds = list(workload.rounds())
    assert len(rounds) == 5 and all(rounds)
