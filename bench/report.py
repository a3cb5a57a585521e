"""The suite's Markdown report and PNG plots, from its results.json (re-runnable on its own).

    .venv/bin/python -m bench.report bench/results/suite-<time>/results.json
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after the backend is chosen

Results = dict[str, Any]


def _users(scale: Results) -> str:
    users = scale["users"]
    return f"{users // 1_000_000}M" if users % 1_000_000 == 0 else f"{users // 1000}k" if users % 1000 == 0 else str(users)


def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _freshness(scale: Results, rate: int) -> Results | None:
    return next((f for f in scale["freshness"] if f["rate"] == rate), None)


def summary(results: Results) -> list[dict[str, Any]]:
    """One row per target: what it asks, the figure per scale, and whether it is met."""
    targets, scales = results["targets"], results["scales"]
    rows: list[dict[str, Any]] = []

    def add(name: str, target: str, values: dict[str, float | None], met: Callable[[float], bool] | None, unit: str = "") -> None:
        """A row; `met` None: a figure reported, with no target to meet."""
        judged = [met(v) for v in values.values() if v is not None] if met is not None else []
        rows.append({"measure": name, "target": target, "values": values, "unit": unit, "met": all(judged) if judged else None})

    top = max(s["users"] for s in scales)
    fastest = max((f["rate"] for s in scales for f in s["freshness"]), default=None)
    if fastest is not None:
        add(f"freshness p50 at {fastest:,} events/s", f"≤ {targets['freshness_p50_seconds']} s",
            {_users(s): (_freshness(s, fastest) or {}).get("p50_seconds") for s in scales}, lambda v: v <= targets["freshness_p50_seconds"], "s")
        add(f"freshness p99 at {fastest:,} events/s", f"≤ {targets['freshness_p99_seconds']} s",
            {_users(s): (_freshness(s, fastest) or {}).get("p99_seconds") for s in scales}, lambda v: v <= targets["freshness_p99_seconds"], "s")
    if all(s.get("single_changes") for s in scales) and "single_change_seconds" in targets:
        add("a single change visible (median, max)", f"≤ {targets['single_change_seconds']} s",
            {_users(s): s["single_changes"]["max_seconds"] for s in scales}, lambda v: v <= targets["single_change_seconds"], "s")
    if all(s.get("startup") for s in scales) and "startup_seconds" in targets:
        add("`ingest --once` on an existing lake: to its first batch", f"≤ {targets['startup_seconds']} s",
            {_users(s): s["startup"]["median_to_first_batch_seconds"] for s in scales}, lambda v: v <= targets["startup_seconds"], "s")
    for key, what in (("catch_up", "catch-up throughput"), ("catch_up_rebuilt", "catch-up throughput, the local state rebuilt from the tables first")):
        for s in scales:  # a target per scale
            if s.get(key):
                least = _at_scale(targets, "catch_up_events_per_second", s["users"])
                add(f"{what} ({_users(s)} users)", f"≥ {least:,} events/s", {_users(s): s[key]["events_per_second"]}, lambda v, t=least: v >= t, "events/s")
    if all(s.get("sustain") for s in scales):
        add("highest rate ingest sustains (p99 within target, not growing)", "reported",
            {_users(s): s["sustain"]["highest_sustained_events_per_second"] for s in scales}, None, "events/s")
    if fastest is not None:
        add(f"batch p99 at {fastest:,} events/s", "reported", {_users(s): (_freshness(s, fastest) or {}).get("batch_p99_seconds") for s in scales}, None, "s")
    if all(s.get("startup") and "peak_python_mib" in s["startup"]["runs"][0] for s in scales):  # a real `lakemv ingest` driver
        add("driver memory of `ingest --once`, peak resident (Python + JVM)", "reported",
            {_users(s): max(r["peak_python_mib"] + r["peak_jvm_mib"] for r in s["startup"]["runs"]) for s in scales}, None, "MiB")
    if all(s.get("driver_memory") for s in scales):
        peak = {s["users"]: (s["driver_memory"]["python_peak_bytes"] + s["driver_memory"]["jvm_peak_bytes"]) / 2**20 for s in scales}
        add("the suite's process, peak resident (Python, with the generated workload, + JVM)", "reported",
            {_users(s): peak[s["users"]] for s in scales}, None, "MiB")
        if len(scales) >= 2:  # what more users cost, apart from the fixed JVM heap and interpreter
            small, big = min(scales, key=lambda s: s["users"]), max(scales, key=lambda s: s["users"])
            growth = (peak[big["users"]] - peak[small["users"]]) * 1_000_000 / (big["users"] - small["users"])
            add("driver memory per 1M more users", "reported", {f"{_users(small)}→{_users(big)}": growth}, None, "MiB")
    for s in scales:
        if not s["batches"] or not s["full_recompute"]:
            continue
        batch, full = s["batches"]["median_one_k"], s["full_recompute"]
        if s["users"] == top:
            add(f"1k-change batch vs Spark full recompute, CPU ({_users(s)} users)", f"≥ {targets['cheaper_than_spark_full']:.0f}× cheaper",
                {_users(s): full["spark_best"]["cpu_seconds"] / batch["cpu_seconds"]}, lambda v: v >= targets["cheaper_than_spark_full"], "×")
        faster = _at_scale(targets, "faster_than_duckdb_full", s["users"])
        add(f"1k-change batch vs DuckDB full recompute, wall ({_users(s)} users)", f"≥ {faster:.0f}× faster",
            {_users(s): full["duckdb_best"]["seconds"] / batch["seconds"]}, lambda v, t=faster: v >= t, "×")
    if len(scales) >= 2 and all(s["batches"] for s in scales):
        small, big = min(scales, key=lambda s: s["users"]), max(scales, key=lambda s: s["users"])
        growth = big["batches"]["median_one_k"]["seconds"] / small["batches"]["median_one_k"]["seconds"]
        add(f"1k-change batch growth, {_users(small)} → {_users(big)} users", f"≤ {targets['growth_for_10x_state']}×",
            {f"{_users(small)}→{_users(big)}": growth}, lambda v: v <= targets["growth_for_10x_state"], "×")
    add("snapshot load", f"≥ {targets.get('snapshot_events_per_second', 0):,} events/s",
        {_users(s): s["setup"]["snapshot_events"] / s["setup"]["load_seconds"] for s in scales},
        lambda v: v >= targets.get("snapshot_events_per_second", 0), "events/s")
    if all(s["batches"] for s in scales) and "fan_out_seconds" in targets:
        add("fan-out: a description edit of a 10k-star repository", f"≤ {targets['fan_out_seconds']} s",
            {_users(s): s["batches"]["fan_out"]["seconds"] for s in scales}, lambda v: v <= targets["fan_out_seconds"], "s")
    if all(s.get("many_views") for s in scales) and "per_view_seconds" in targets:
        views = scales[0]["many_views"]["many"]["views"]
        add(f"one more view, {views} views (per 1k-change batch)", f"≤ {targets['per_view_seconds'] * 1000:.0f} ms",
            {_users(s): s["many_views"]["per_view_seconds"] for s in scales}, lambda v: v <= targets["per_view_seconds"], "s")
    if all(s["batches"] for s in scales):
        add("batch of no lines", f"≤ {targets['empty_batch_seconds']} s",
            {_users(s): s["batches"]["empty"]["seconds"] for s in scales}, lambda v: v <= targets["empty_batch_seconds"], "s")
    return rows  # fmt: skip


def _at_scale(targets: dict[str, Any], name: str, users: int) -> Any:
    """A target that issue 31 sets per scale (`<name>_100k` below 1M users, `<name>_1m` from 1M on), else
    the one target (and in results written before there were per-scale targets)."""
    return targets.get(f"{name}_1m" if users >= 1_000_000 else f"{name}_100k", targets[name])


def _plots(results: Results, out: Path) -> list[tuple[str, str]]:
    scales = results["scales"]
    made = []

    if any(s["freshness"] for s in scales):
        figure, axes = plt.subplots(1, len(scales), figsize=(6 * len(scales), 4), squeeze=False)
        for axis, scale in zip(axes[0], scales, strict=True):
            for run in scale["freshness"]:
                points = run["file_latencies"]
                axis.scatter([p[0] for p in points], [p[1] for p in points], s=4, label=f"{run['rate']:,} events/s")
            axis.axhline(results["targets"]["freshness_p50_seconds"], color="grey", linestyle="--", linewidth=0.8)
            axis.axhline(results["targets"]["freshness_p99_seconds"], color="red", linestyle="--", linewidth=0.8)
            axis.set(title=f"freshness, {_users(scale)} users", xlabel="event time (s into the run)", ylabel="visible in user_profile after (s)")
            axis.legend()
        figure.tight_layout()
        figure.savefig(out / "freshness.png", dpi=110)
        plt.close(figure)
        made.append(("freshness.png", "Freshness: per landing file, seconds from event time until user_profile shows it (dashed: p50 and p99 targets)"))

    if all(s["batches"] and s["full_recompute"] for s in scales):
        figure, axes = plt.subplots(1, len(scales), figsize=(6 * len(scales), 4), squeeze=False)
        for axis, scale in zip(axes[0], scales, strict=True):
            b, full = scale["batches"], scale["full_recompute"]
            labels = ["1k changes", "no lines", "applied\nalready", "one table", "fan-out", "Spark\nfull", "DuckDB\nfull"]
            values = [b["median_one_k"]["seconds"], b["empty"]["seconds"], b["already_applied"]["seconds"], b["one_table"]["seconds"],
                      b["fan_out"]["seconds"], full["spark_best"]["seconds"], full["duckdb_best"]["seconds"]]  # fmt: skip
            colors = ["tab:blue"] * 5 + ["tab:orange", "tab:green"]
            axis.bar(labels, values, color=colors)
            axis.set(title=f"one batch vs full recompute, {_users(scale)} users", ylabel="wall seconds")
            axis.tick_params(axis="x", labelsize=8)
        figure.tight_layout()
        figure.savefig(out / "batches.png", dpi=110)
        plt.close(figure)
        made.append(("batches.png", "Latency per batch: incremental batches (blue) against full recomputes of user_profile"))

    if all(s["catch_up"] for s in scales):
        figure, axis = plt.subplots(figsize=(7, 4))
        for scale in scales:
            units = scale["catch_up"]["units"]
            axis.plot(range(1, len(units) + 1), [u["events"] / u["seconds"] if u["seconds"] else 0 for u in units], marker="o",
                      label=f"{_users(scale)} users: {scale['catch_up']['events_per_second']:,} events/s overall")  # fmt: skip
        axis.axhline(results["targets"]["catch_up_events_per_second"], color="red", linestyle="--", linewidth=0.8, label="target")
        axis.set(title="catch-up: throughput per unit while draining the backlog", xlabel="unit", ylabel="events / s", yscale="log")
        axis.legend()
        figure.tight_layout()
        figure.savefig(out / "throughput.png", dpi=110)
        plt.close(figure)
        made.append(("throughput.png", "Throughput: events/s of each unit draining the backlog (log scale; dashed: target)"))

    if len(scales) >= 2 and all(s["batches"] and s["full_recompute"] for s in scales):
        figure, axis = plt.subplots(figsize=(7, 4))
        users = [s["users"] for s in scales]
        series = {
            "incremental 1k-change batch": [s["batches"]["median_one_k"]["seconds"] for s in scales],
            "Spark full recompute": [s["full_recompute"]["spark_best"]["seconds"] for s in scales],
            "DuckDB full recompute": [s["full_recompute"]["duckdb_best"]["seconds"] for s in scales],
            "batch of no lines": [s["batches"]["empty"]["seconds"] for s in scales],
        }
        for label, values in series.items():
            axis.plot(users, values, marker="o", label=label)
        axis.set(title="scaling with state size", xlabel="users", ylabel="wall seconds", xscale="log", yscale="log")
        axis.legend()
        figure.tight_layout()
        figure.savefig(out / "scaling.png", dpi=110)
        plt.close(figure)
        made.append(("scaling.png", "Scaling: the same batch against 10× the state, next to full recomputes (log-log)"))
    return made


def markdown(results: Results, plots: list[tuple[str, str]]) -> str:
    m, scales = results["machine"], results["scales"]
    lines = [
        "# lakemv benchmark report",
        "",
        f"Run {results['started']} → {results.get('finished', '?')} with `{results['command']}`.",
        f"Machine: {m['cpus']} CPUs ({m['cpu_model']}), {m['memory_gib']} GiB, Python {m['python']}, Spark {m['spark']}, "
        f"DuckDB {m['duckdb']}, {m['os']}.",
        "",
        "## Targets",
        "",
        "| measure | target | figure | met |",
        "|---|---|---|---|",
    ]
    for row in summary(results):
        values = ", ".join(f"{k}: {_fmt(v, 0 if row['unit'] == 'events/s' else 2)}{' ' + row['unit'] if row['unit'] not in ('×', '') else row['unit']}"
                           for k, v in row["values"].items())  # fmt: skip
        met = "—" if row["met"] is None else ("yes" if row["met"] else "**no**")
        lines.append(f"| {row['measure']} | {row['target']} | {values} | {met} |")
    for scale in scales:
        setup, b, full = scale["setup"], scale["batches"], scale["full_recompute"]
        lines += [
            "",
            f"## {scale['users']:,} users",
            "",
            f"Snapshot: {setup['snapshot_events']:,} events loaded in {setup['load_seconds']} s; mirrors "
            + ", ".join(f"{t} {n:,}" for t, n in sorted(setup["mirror_rows"].items()))
            + f"; `user_profile` {setup['view_rows']:,} rows, built in {setup['build']['seconds']} s.",
            "",
        ]
        for key, error in (scale.get("errors") or {}).items():
            lines += [f"**{key} failed**: `{_error_head(error)}`", ""]
        if b:
            lines += ["| batch | events | view keys | wall s | CPU s | view step s | Spark jobs | Iceberg commits |", "|---|---|---|---|---|---|---|---|"]
            named = [(f"1k-change batch {i + 1}", x) for i, x in enumerate(b["one_k"])] + [
                ("no lines", b["empty"]), ("events already applied", b["already_applied"]),
                ("one table (payment_info)", b["one_table"]), (f"fan-out ({b['fan_out']['stars']:,} stars)", b["fan_out"]),
            ]  # fmt: skip
            for label, x in named:
                steps = ", ".join(f"{k} {v:.2f}" for k, v in x["view_steps"].items())
                lines.append(f"| {label} | {x['events']:,} | {x['keys_affected'] or 0:,} | {x['seconds']:.2f} | {x['cpu_seconds']:.2f} | "
                             f"{x['view_seconds']:.2f}{f' ({steps})' if steps else ''} | {x['spark_jobs']} | {x['iceberg_commits']} |")  # fmt: skip
        if scale["setup"]["build"].get("state"):
            state = scale["setup"]["build"]["state"]
            parts = ", ".join(f"{name} {part['rows']:,} rows" for name, part in state["reloaded"].items())
            resident = f", +{state['resident_bytes'] / 2**20:,.0f} MiB resident in the driver" if "resident_bytes" in state else ""
            lines += ["", f"Local state: loaded from the tables in {state['rebuild_seconds']} s, "
                      f"{state['disk_bytes'] / 2**20:,.1f} MiB on disk{resident} ({parts})."]  # fmt: skip
        if b and full:
            one = b["median_one_k"]
            lines += [
            "",
            "| full recompute of user_profile | wall s (best) | CPU s | 1k-change batch is |",
            "|---|---|---|---|",
            f"| Spark, written to an Iceberg table | {full['spark_best']['seconds']:.2f} | {full['spark_best']['cpu_seconds']:.2f} | "
            f"{full['spark_best']['seconds'] / one['seconds']:.2f}× faster, {full['spark_best']['cpu_seconds'] / one['cpu_seconds']:.2f}× cheaper |",
            f"| DuckDB, written to Parquet | {full['duckdb_best']['seconds']:.2f} | {full['duckdb_best']['cpu_seconds']:.2f} | "
            f"{full['duckdb_best']['seconds'] / one['seconds']:.2f}× faster, {full['duckdb_best']['cpu_seconds'] / one['cpu_seconds']:.2f}× cheaper |",
            ]
        if scale["freshness"]:
            lines += ["", "| freshness | offered events/s | seconds | events measured | p50 s | p99 s | max s | steady | batches | mean events/batch | batch p50 s | batch p99 s |",
                      "|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for f in scale["freshness"]:
            batches = f["batches"]
            mean = sum(x["events"] for x in batches) / len(batches) if batches else 0
            flag = f" ({f['events_not_visible']:,} never visible: lower bounds)" if f["events_not_visible"] else ""
            steady = {True: "yes", False: "**no**"}.get(f.get("steady"), "—")
            lines.append(f"| {f['rate']:,} events/s{flag} | {f['offered_events_per_second']:,} | {f['seconds']:.0f} | {f['events_measured']:,} | "
                         f"{_fmt(f['p50_seconds'])} | {_fmt(f['p99_seconds'])} | {_fmt(f['max_seconds'])} | {steady} | {len(batches)} | {mean:,.0f} | "
                         f"{_fmt(f.get('batch_p50_seconds'))} | {_fmt(f.get('batch_p99_seconds'))} |")  # fmt: skip
        ramp = scale.get("sustain")
        if ramp:
            highest = ramp["highest_sustained_events_per_second"]
            lines += ["", f"Rate ramp (×1.5 every {ramp['step_seconds']:.0f} s; sustained: p99 ≤ the target and not growing): "
                      + ", ".join(f"{st['rate']:,} events/s p99 {_fmt(st['p99_seconds'])} s {'ok' if st['sustained'] else '**not**'}" for st in ramp["steps"])
                      + f". **Highest sustained: {f'{highest:,} events/s' if highest else 'none'}**."]  # fmt: skip
        single = scale.get("single_changes")
        if single:
            lines += ["", f"Single changes (one new star every 5 s into a running, idle ingest): visible after "
                      f"{_fmt(single['p50_seconds'])} s (median), {_fmt(single['max_seconds'])} s (max) over {single['events_measured']} events."]  # fmt: skip
        start = scale.get("startup")
        if start:
            lines += ["", "Start-up of `lakemv ingest --once` on this lake (its state in place, one new file): "
                      + ", ".join(f"{r['to_first_batch_seconds']:.2f} s to the first batch ({r['seconds']:.1f} s in all"
                                  + (f"; peak resident {r['peak_python_mib']:,} MiB Python + {r['peak_jvm_mib']:,} MiB JVM" if "peak_python_mib" in r else "")
                                  + ")" for r in start["runs"]) + "."]  # fmt: skip
        for label, c in (("Catch-up", scale["catch_up"]), ("Catch-up with the local state rebuilt from the tables first", scale.get("catch_up_rebuilt"))):
            if c:
                ready = f"; ready to drain after {c['ready_seconds']:.1f} s" if c.get("ready_seconds") is not None else ""
                p99 = f"; units p50 {_fmt(c['unit_p50_seconds'])} s, p99 {_fmt(c['unit_p99_seconds'])} s" if c.get("unit_p99_seconds") is not None else ""
                lines += ["", f"{label}: {c['events']:,} backlog events drained in {c['seconds']:.1f} s = **{c['events_per_second']:,} events/s** "
                          f"({len(c['units'])} units, {c['cpu_seconds']:.0f} CPU s{ready}{p99})."]  # fmt: skip
        memory = scale.get("driver_memory")
        if memory:
            lines += ["", f"The suite's own process at the end of this scale (its Python also holds the generated workload): peak resident {memory['python_peak_bytes'] / 2**20:,.0f} MiB (Python) + "
                      f"{memory['jvm_peak_bytes'] / 2**20:,.0f} MiB (JVM); "
                      f"JVM heap in use {memory['jvm_heap_used_bytes'] / 2**20:,.0f} of {memory['jvm_heap_max_bytes'] / 2**20:,.0f} MiB "
                      "(peaks are since the process started: a later scale's include the earlier ones)."]  # fmt: skip
        v = scale.get("many_views")
        if v:
            lines += ["", f"Many views: the same recorded 1k-change batches replayed on the lake restored before each of {v.get('repeats', 1)} repeats "
                      "(median batch of each repeat; the spread is the lowest and highest repeat).", "",
                      "| many views | views | build s | median 1k-change batch s | spread s | CPU s | Spark jobs | Iceberg commits |",
                      "|---|---|---|---|---|---|---|---|"]  # fmt: skip
            for label in ("one", "many"):
                r, m = v[label], v[label]["median"]
                spread = "–".join(f"{x:.2f}" for x in r.get("seconds_spread", []))
                build = f"{r['build']['seconds']:.1f}" if r.get("build") else "—"  # (not timed: a resumed run's kept lake made by hand)
                lines.append(f"| {label} | {r['views']} | {build} | {m['seconds']:.2f} | {spread} | {m['cpu_seconds']:.2f} | "
                             f"{m['spark_jobs']} | {m['iceberg_commits']} |")  # fmt: skip
            if v["many"].get("verify"):
                lines += ["", f"After the last repeat's batches: {_verified(v['many']['verify'])}"]
            spread = v.get("per_view_seconds_spread")
            lines += ["", f"One more view adds {v['per_view_seconds'] * 1000:,.0f} ms ({v['per_view_cpu_seconds'] * 1000:,.0f} CPU ms) to a 1k-change batch"
                      + (f" (repeats: {spread[0] * 1000:,.0f}–{spread[1] * 1000:,.0f} ms)." if spread else ".")]  # fmt: skip
        if scale.get("verify"):
            lines += ["", f"After every measure: {_verified(scale['verify'])}"]
        cost = scale.get("cost")
        if cost:
            lines += ["", "| cost per key | explain: rows per average key | explain: rows per key a batch reaches | measured | explain: keys per batch | measured | ms per key |",
                      "|---|---|---|---|---|---|---|"]
            for view, c in cost.items():
                lines.append(f"| {view} | {_fmt(c['average_key_rows'])} | {_fmt(c['predicted_rows_per_key'])} | {_fmt(c['measured_rows_per_key'])} | "
                             f"{_fmt(c['predicted_keys_per_batch'])} | {_fmt(c['measured_keys_per_batch'])} | {_fmt(c['seconds_per_key_ms'])} |")  # fmt: skip
    lines += ["", "## Plots", ""]
    for name, caption in plots:
        lines += [f"![{caption}]({name})", "", f"*{caption}*", ""]
    return "\n".join(lines) + "\n"


def write_report(results: Results, out: Path) -> Path:
    plots = _plots(results, out)
    path = out / "report.md"
    path.write_text(markdown(results, plots), encoding="utf-8")
    return path


def _error_head(error: str) -> str:
    """A failed measure's message (`bench.suite._failure`) up to its first frame, Python's (`  File ...`)
    or the JVM's (`\tat ...`): a Java error's cause is on its second line (`Py4JJavaError: ...` then
    `: java.lang.OutOfMemoryError: ...`)."""
    head = []
    for line in error.strip().splitlines():
        if not line.strip() or line[0].isspace():
            break
        head.append(line.strip())
    return " ".join(head)


def _verified(verify: dict) -> str:
    """One sentence on a `verify` of the suite: DuckDB's recomputes against the view tables."""
    text = f"{verify['matching']} of {verify['views']} views match DuckDB's recompute (`verify`)"
    return text + ("." if not verify["failed"] else "; " + "; ".join(verify["failed"].values()))


if __name__ == "__main__":
    source = Path(sys.argv[1])
    print(write_report(json.loads(source.read_text(encoding="utf-8")), source.parent))
