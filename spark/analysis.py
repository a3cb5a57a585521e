"""Spark's own analysis of every view, when the views are loaded: a user mistake the planner cannot
see (an unknown function, a type Spark refuses) is reported like a planner refusal — the view file,
the fragment, Spark's reason, no Java trace — by `lakemv views`, `explain` and at ingest start.

Each view is analysed as written, over empty tables with the declared columns of its sources, in a
session of its own (no job runs). Results are remembered per definition (SQL, key, declarations of
the tables read, Spark version) in `<warehouse>/_lakemv/view-analysis.json`, so commands that run no
Spark (`views`, `explain`) start a JVM only for a definition they have not seen.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.settings import LakeSettings
from lakemv.core.errors import ViewDefinitionError
from lakemv.core.runtime.files import replace_file
from lakemv.core.sql.quote import q

RECORD = Path("_lakemv") / "view-analysis.json"


def digest(plan, sources: Mapping[str, SourceTable], spark_version: str) -> str:  # noqa: ANN001 - ViewPlan
    """What the analysis of `plan` depends on."""
    read = {**sources, **{v.name: v for v in plan.inputs}}  # a view it reads: its definition's fingerprint
    declared = {t: read[t].model_dump(mode="json") for t in sorted(plan.tables)}
    text = json.dumps([plan.definition.sql, plan.definition.key, declared, spark_version], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _spark_version() -> str:
    from importlib.metadata import version

    return version("pyspark")


def _error(plan, reason: str, fragment: str | None) -> ViewDefinitionError:  # noqa: ANN001
    where = f" ({plan.definition.location})" if plan.definition.location else ""
    return ViewDefinitionError(plan.name, f"Spark cannot analyse it{where}: {reason}", fragment or None)


def analyse(spark, plans: Sequence, sources: Mapping[str, SourceTable], upstream: Sequence = ()) -> dict[str, tuple[str, str | None] | None]:  # noqa: ANN001
    """Analyse each view in Spark: name -> None when it analyses, else (reason, fragment). `upstream`:
    the views they read (in dependency order, `plans` among them): each a temp view of its SQL, so
    a view that reads it is analysed over its columns as Spark types them."""
    from pyspark.errors import AnalysisException

    session = spark.newSession()  # temp views of its own
    for name, source in sources.items():
        schema = ", ".join(f"{q(c.name)} {c.spark_type}" for c in source.columns)
        session.createDataFrame([], schema).createOrReplaceTempView(name)
    wanted = {plan.name for plan in plans}
    needed = set(wanted)  # and every view they read, through others too
    for plan in reversed(upstream):
        if plan.name in needed:
            needed.update(plan.upstream)
    results: dict[str, tuple[str, str | None] | None] = {}
    for plan in [p for p in upstream if p.name in needed] if upstream else plans:
        try:
            rows = session.sql(plan.definition.sql)
            rows.schema  # noqa: B018 - analysis only
            if plan.finality is not None:  # (its table has the flag its readers may read)
                rows = rows.selectExpr("*", f"FALSE AS {q(plan.columns[-1])}")
            rows.createOrReplaceTempView(plan.name)
            if plan.name not in wanted:
                continue
            results[plan.name] = None
        except AnalysisException as exc:  # ParseException is one too
            contexts = exc.getQueryContext()
            fragment = contexts[0].fragment() if contexts else None
            reason = (exc.getMessage() or str(exc)).strip().splitlines()[0]
            results[plan.name] = (reason, fragment)
    return results


def _read(path: Path) -> dict[str, list | None]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _write(path: Path, record: Mapping[str, list | None]) -> None:
    try:
        replace_file(path, json.dumps(record, sort_keys=True))
    except OSError:
        pass  # a cache: a warehouse we cannot write only costs the next command a JVM


def check_views(
    settings: LakeSettings,
    plans: Sequence,
    sources: Mapping[str, SourceTable],
    spark: Callable[[], object] | object | None = None,
) -> None:
    """Raise the first view Spark cannot analyse as a ViewDefinitionError.

    `spark` is a running session, or a function that starts one (called only when some definition
    has no recorded result), or None to use the record alone (unrecorded views pass unchecked).
    """
    path = settings.local_root / RECORD
    record = _read(path)
    version = _spark_version()
    digests = {plan.name: digest(plan, sources, version) for plan in plans}
    missing = [plan for plan in plans if digests[plan.name] not in record]
    if missing and spark is not None:
        session = spark() if callable(spark) else spark
        for name, result in analyse(session, missing, sources, plans).items():
            record[digests[name]] = None if result is None else list(result)
        _write(path, record)
    for plan in plans:
        result = record.get(digests[plan.name])
        if result is not None:
            raise _error(plan, result[0], result[1])
