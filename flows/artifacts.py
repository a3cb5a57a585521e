"""What each flow run did, as Prefect artifacts: the UI's answer to "what did this run do?".

Keys are what make an artifact one click away: the UI's Artifacts page lists the latest artifact of
each key, and a key's page lists its history, run by run. lakemv writes
* `<deployment>` (`lakemv-ingest`, `lakemv-verify`, ...; a run the CLI started: `cli-<flow>`): the
  run's summary, markdown with a table per view (and source), each view linking to its own key;
* `<deployment>-views` and `<deployment>-sources`: the same rows as table artifacts;
* `<flow>-<view>` (`ingest-user-profile`, `verify-user-profile`): one view's part of the latest run
  that touched it.

The contents are built by pure functions (`*_summary`, `view_rows`, ...) from the flows' results;
`publish` sends them. Nothing secret is written: names, counts, times and lakemv's own reasons only.
A failure to write an artifact is logged as a warning and never fails the run.
"""

from __future__ import annotations

import base64
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from uuid import UUID

from lakemv.core.batch.freshness import Freshness
from lakemv.core.batch.result import BatchResult

UI_KEY_PATH = "/artifacts/key/{}"  # the UI's page of one key: its latest artifact and history


def artifact_key(*parts: str) -> str:
    """A key Prefect accepts (lower-case letters, digits and dashes) from names such as `user_profile`."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", "-".join(parts).lower())).strip("-")


def run_key(flow: str) -> str:
    """This run's summary key: its deployment's name, or `cli-<flow>` for a run without one."""
    from prefect.runtime import deployment

    return artifact_key(deployment.name or f"cli-{flow}")


def cell(value: object) -> str:
    """`value` as text that stays inside one markdown table cell."""
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("<", "&lt;")


def markdown_table(rows: Sequence[Mapping[str, object]]) -> str:
    """Rows of the same keys as a markdown table (values as they are: escape text with `cell`)."""
    if not rows:
        return "_none_\n"
    heads = list(rows[0])
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    lines += ["| " + " | ".join(str(row[h]) for h in heads) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def seconds(value: float | None) -> str:
    """A duration people read at a glance: `0.4s`, `12s`, `3m 20s`, `2h 5m`, `41d 3h`."""
    if value is None:
        return "—"
    if value < 10:
        return f"{value:.1f}s"
    whole = int(round(value))
    for unit, size, smaller, small in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if whole >= size:
            rest = (whole % size) // small
            return f"{whole // size}{unit}" + (f" {rest}{smaller}" if rest else "")
    return f"{whole}s"


# ---- the freshness chart ----------------------------------------------------------------------------
def freshness_chart(fresh: Freshness, start: float, end: float, buckets: int = 30, width: int = 180, height: int = 30) -> str:
    """The view's worst lag in each of `buckets` slices of [start, end] as bars (red over its budget,
    whose level is a dashed line), as an SVG `data:` URI a markdown image shows. The scale tops at the
    budget or the worst lag; a slice without a batch that showed it changes has no bar."""
    worst: list[float | None] = [None] * buckets
    span = (end - start) / buckets
    for at, lag in [*fresh.points, (end, fresh.lag)]:
        if start <= at <= end:
            i = min(buckets - 1, int((at - start) / span))
            worst[i] = lag if worst[i] is None else max(worst[i], lag)  # type: ignore[type-var]
    top = max(fresh.budget or 0.0, *(w for w in worst if w is not None), 1e-6)
    step = width / buckets
    level = lambda lag: (height - 2) * min(lag, top) / top  # noqa: E731
    bars = "".join(
        f'<rect x="{i * step + 0.5:.1f}" y="{height - 1 - max(level(w), 1):.1f}" width="{step - 1:.1f}" height="{max(level(w), 1):.1f}" '
        f'fill="{"#d32f2f" if fresh.budget and w > fresh.budget else "#43a047"}"/>'
        for i, w in enumerate(worst)
        if w is not None
    )
    budget = ""
    if fresh.budget:
        y = height - 1 - level(fresh.budget)
        budget = f'<line x1="0" x2="{width}" y1="{y:.1f}" y2="{y:.1f}" stroke="#555" stroke-dasharray="3,2"/>'
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">'
        f'<rect width="{width}" height="{height}" fill="#f5f5f5"/>{bars}{budget}</svg>'
    )
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()


def lag_text(fresh: Freshness | None) -> str:
    """`1.2s / 1 minute budget`; when the view is or was over its budget in the window, marked, with its worst."""
    if fresh is None:
        return "—"
    if fresh.budget is None:
        return f"{seconds(fresh.lag)} (maintained every batch)"
    if fresh.behind:
        return f"⚠ {seconds(fresh.lag)} now, worst {seconds(fresh.worst)} / {seconds(fresh.budget)} budget"
    return f"{seconds(fresh.lag)} / {seconds(fresh.budget)} budget"


# ---- ingest -------------------------------------------------------------------------------------------
@dataclass
class ViewTally:
    """One view over a run's batches."""

    keys: int = 0
    upserts: int = 0
    deletes: int = 0
    seconds: float = 0.0
    ways: Counter[str] = field(default_factory=Counter)
    reason: str | None = None  # the last batch's why
    deferred: int = 0  # batches that left its keys waiting for its budget
    batches: list[dict[str, object]] = field(default_factory=list)


def tally_views(batches: Iterable[BatchResult]) -> dict[str, ViewTally]:
    """Per view, what a run's batches did to it."""
    found: dict[str, ViewTally] = {}
    for batch in batches:
        for name, view in batch.views.items():
            tally = found.setdefault(name, ViewTally())
            if view.deferred:
                tally.deferred += 1
                continue
            if view.paused:
                continue
            tally.keys += view.keys or 0
            tally.upserts += view.upserts
            tally.deletes += view.deletes
            tally.seconds += view.seconds
            tally.ways[view.way] += 1
            tally.reason = view.note or view.reason or tally.reason
            tally.batches.append(
                {"batch": batch.batch_id, "keys reached": "all" if view.keys is None else view.keys, "upserts": view.upserts,
                 "deletes": view.deletes, "how": view.way, "why": cell(view.note or view.reason or ""), "seconds": round(view.seconds, 3)}
            )  # fmt: skip
    return found


def view_rows(tallies: Mapping[str, ViewTally], fresh: Mapping[str, Freshness]) -> list[dict[str, object]]:
    """Per view, reached by the run or not: keys reached, rows changed, how and why, seconds, lag
    (seconds) against its budget (seconds, None: every batch)."""
    rows = []
    for name in sorted(set(tallies) | set(fresh)):
        tally, f = tallies.get(name, ViewTally()), fresh.get(name)
        how = ", ".join(f"{n} {way}" for way, n in sorted(tally.ways.items())) or ("waiting for its budget" if tally.deferred else "not reached")
        rows.append({
            "view": name, "keys reached": tally.keys, "rows changed": tally.upserts + tally.deletes, "how (batches)": how,
            "why": tally.reason or "", "seconds": round(tally.seconds, 2), "lag seconds": None if f is None else round(f.lag, 1),
            "budget seconds": None if f is None else f.budget, "over budget": bool(f and f.behind),
        })  # fmt: skip
    return rows


def source_rows(batches: Sequence[BatchResult], behind: Mapping[str, int], sources: Iterable[str]) -> list[dict[str, object]]:
    """Per source table: changes applied, dead letters and (Kafka) records still to read (None: not known)."""
    changes: Counter[str] = Counter()
    letters: Counter[str] = Counter()
    for batch in batches:
        changes.update(batch.merged)
        letters.update(batch.letters)
    names = sorted(set(sources) | set(changes) | {t for t in letters if t})
    rows = [{"source": t, "changes applied": changes[t], "dead letters": letters[t], "behind (records)": behind.get(t)} for t in names]
    if letters[""]:
        rows.append({"source": "(no declared table)", "changes applied": 0, "dead letters": letters[""], "behind (records)": None})
    return rows


def ingest_summary(
    totals: Mapping[str, object],
    views: Sequence[Mapping[str, object]],
    sources: Sequence[Mapping[str, object]],
    fresh: Mapping[str, Freshness],
    link: Callable[[str], str],
    chart: Callable[[Freshness], str],
) -> str:
    """The ingest run's markdown: totals, the views over budget, a row per view (linked to its own key,
    with its chart) and per source."""
    text = (
        f"# Ingest: {totals['events']:,} events in {totals['batches']} batches, {totals['seconds']:.1f}s\n\n"
        f"**{totals['dead_letters']:,} dead letters** in this run"
        ' (`lakemv query "select * from dead_letters"` lists them; `lakemv status` counts them per source)\n\n'
    )
    over = [str(v["view"]) for v in views if v["over budget"]]
    if over:
        text += "**Over their freshness budget in the last hour:** " + ", ".join(cell(v) for v in over) + "\n\n"
    shown = [  # (what stands out first: a lag and its chart; the reason, long, last)
        {
            "view": f"[{cell(v['view'])}]({link(str(v['view']))})",
            "lag": lag_text(fresh.get(str(v["view"]))),
            "last hour": f"![lag of {cell(v['view'])}]({chart(fresh[str(v['view'])])})" if str(v["view"]) in fresh else "",
            **{k: cell(v[k]) for k in ("keys reached", "rows changed", "how (batches)", "seconds", "why")},
        }
        for v in views
    ]
    listed = [{k: cell("—" if v is None else v) for k, v in row.items()} for row in sources]
    return (
        text + "## Views\n*lag*: how long the oldest change its tables received that it does not show yet has waited "
        "(0: it shows every change); *last hour*: its lag at each batch that showed it changes, the dashed line its budget.\n\n"
        + markdown_table(shown) + "\n## Sources\n*behind*: records the source's Kafka topic holds beyond what this run read.\n\n"
        + markdown_table(listed)
    )


def view_summary(flow: str, view: str, fresh: Freshness | None, chart: str | None, batches: Sequence[Mapping[str, object]]) -> str:
    """One view's part of an ingest run: its lag, its chart and its batches."""
    text = f"# {cell(view)}: {flow}\n\n**lag:** {lag_text(fresh)}\n\n"
    if chart:
        text += f"![lag over the last hour]({chart})\n\n"
    return text + "## Batches of this run\n" + markdown_table(batches)


# ---- verify, compact, backfill ------------------------------------------------------------------------
def verify_rows(results: Mapping[str, Mapping[str, object]]) -> list[dict[str, object]]:
    """Per view: rows matched, mismatched, missing and extra (or why it was not verified)."""
    rows = []
    for name, r in sorted(results.items()):
        if "skipped" in r:
            rows.append({"view": cell(name), "outcome": "not verified", "matched": "—", "mismatched": "—", "missing": "—",
                         "extra": "—", "note": cell(r["skipped"])})  # fmt: skip
            continue
        ok = not (r["mismatching"] or r["missing"] or r["extra"] or r["duplicate_keys"])
        rows.append({
            "view": cell(name), "outcome": "✅ equal" if ok else "❌ differs", "matched": r["matching"], "mismatched": r["mismatching"],
            "missing": r["missing"], "extra": r["extra"], "note": f"{r['duplicate_keys']} duplicate keys" if r["duplicate_keys"] else "",
        })  # fmt: skip
    return rows


def compact_rows(tables: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
    """Per table: data and delete files, snapshots and bytes, before -> after."""
    return [
        {
            "table": cell(t["table"]),
            "data files": f"{t['data_files_before']} → {t['data_files_after']}",
            "delete files": f"{t['delete_files_before']} → {t['delete_files_after']}",
            "snapshots": f"{t['snapshots_before']} → {t['snapshots_after']}",
            "bytes": f"{t['bytes_before']:,} → {t['bytes_after']:,}",
            "seconds": round(float(t["seconds"]), 2),  # type: ignore[arg-type]
        }
        for t in tables
    ]


# ---- each flow's artifacts ----------------------------------------------------------------------------
def ingest_artifacts(
    summary_key: str,
    batches: Sequence[BatchResult],
    behind: Mapping[str, int],
    sources: Iterable[str],
    fresh: Mapping[str, Freshness],
    window: tuple[float, float],
) -> list[Artifact]:
    """An ingest run's artifacts: its summary (markdown), its views and sources (tables), and a part per
    view its batches maintained. `window`: the (start, end) of the freshness charts, epoch seconds."""
    tallies = tally_views(batches)
    views, listed = view_rows(tallies, fresh), source_rows(batches, behind, sources)
    totals = {
        "events": sum(b.events for b in batches), "batches": len(batches), "dead_letters": sum(b.dead_letters for b in batches),
        "seconds": sum(b.seconds for b in batches),
    }  # fmt: skip
    charts = {name: freshness_chart(f, *window) for name, f in fresh.items()}
    link = lambda name: UI_KEY_PATH.format(artifact_key("ingest", name))  # noqa: E731
    found = [
        Artifact.markdown(ingest_summary(totals, views, listed, fresh, link, lambda f: charts[f.view]), summary_key,
                          "Ingest: per view keys reached, rows changed, how and why, lag against its budget; per source changes, dead letters, Kafka lag"),
        Artifact.table(views, f"{summary_key}-views", "Ingest: per view"),
        Artifact.table(listed, f"{summary_key}-sources", "Ingest: per source"),
    ]  # fmt: skip
    for name, tally in sorted(tallies.items()):
        if tally.batches:
            text = view_summary("ingest", name, fresh.get(name), charts.get(name), tally.batches)
            found.append(Artifact.markdown(text, artifact_key("ingest", name), f"Ingest: what the latest run did to {name}"))
    return found


def verify_artifacts(summary_key: str, results: Mapping[str, Mapping[str, object]]) -> list[Artifact]:
    """A verify run's artifacts: a table of every view it verified, and a part per view."""
    rows = verify_rows(results)
    differs = [r["view"] for r in rows if r["outcome"] == "❌ differs"]
    head = f"# Verify: {len(rows)} views, " + (f"**{len(differs)} differ**: {', '.join(map(str, differs))}" if differs else "all equal") + "\n\n"
    linked = [{**r, "view": f"[{r['view']}]({UI_KEY_PATH.format(artifact_key('verify', str(r['view'])))})"} for r in rows]
    found = [
        Artifact.markdown(head + "DuckDB recomputed each view from the mirrors and compared it with the view's table by key.\n\n"
                          + markdown_table(linked), summary_key, "Verify: per view rows matched, mismatched, missing, extra"),
        Artifact.table(rows, f"{summary_key}-views", "Verify: per view"),
    ]  # fmt: skip
    for row in rows:
        found.append(Artifact.table([row], artifact_key("verify", str(row["view"])), f"Verify: the latest check of {row['view']}"))
    return found


def compact_artifacts(summary_key: str, tables: Sequence[Mapping[str, object]]) -> list[Artifact]:
    """A compact run's artifacts: per table, files and snapshots before and after."""
    rows = compact_rows(tables)
    head = f"# Compact: {len(rows)} tables\n\nFiles and snapshots before → after, per table.\n\n"
    return [
        Artifact.markdown(head + markdown_table(rows), summary_key, "Compact: per table files and snapshots before and after"),
        Artifact.table(rows, f"{summary_key}-tables", "Compact: per table"),
    ]


def backfill_artifacts(summary_key: str, view: str, steps: Sequence[Mapping[str, object]], outcome: str) -> list[Artifact]:
    """A backfill's artifacts: each write-audit-publish step and its outcome, under the run's key and the view's."""
    text = f"# Backfill of {cell(view)}: {cell(outcome)}\n\n" + markdown_table([{k: cell(v) for k, v in s.items()} for s in steps])
    return [
        Artifact.markdown(text, summary_key, f"Backfill of {view}: each write-audit-publish step"),
        Artifact.markdown(text, artifact_key("backfill", view), f"Backfill: the latest of {view}"),
    ]


# ---- publishing ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Artifact:
    """One artifact to write: Prefect's kind (markdown or table), its key, a description and its data."""

    kind: str
    key: str
    description: str
    data: str

    @classmethod
    def markdown(cls, text: str, key: str, description: str) -> Artifact:
        return cls("markdown", key, description, text)

    @classmethod
    def table(cls, rows: Sequence[Mapping[str, object]], key: str, description: str) -> Artifact:
        return cls("table", key, description, json.dumps([dict(r) for r in rows], default=str))


@dataclass(frozen=True)
class Sink:
    """Where a run's artifacts go: its flow run, found in the run's own thread (Spark's callback thread,
    which writes a running stream's, has no run context)."""

    flow_run_id: UUID | None

    @classmethod
    def this_run(cls) -> Sink:
        from prefect.runtime import flow_run

        return cls(UUID(flow_run.id) if flow_run.id else None)

    def write(self, artifacts: Iterable[Artifact], what: str) -> None:
        """Write `artifacts` (over one connection); a failure (the API away, a refused key) is one warning
        in the run's log, never the run's failure: the run's work stands without its report."""
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.actions import ArtifactCreate

        from lakemv.flows.progress import report

        try:
            with get_client(sync_client=True) as client:
                for a in artifacts:
                    client.create_artifact(ArtifactCreate(type=a.kind, key=a.key, description=a.description, flow_run_id=self.flow_run_id, data=a.data))
        except Exception as exc:  # noqa: BLE001 - see above
            report.info(f"could not write the {what} artifacts: {type(exc).__name__}: {str(exc)[:200]}", style="yellow")
