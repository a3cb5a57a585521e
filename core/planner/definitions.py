"""View definitions: one `*.sql` file per view, plain Spark SQL plus a header naming the view's key.

A definition file looks like::

    -- @key: email
    -- @description: One document per user with their stars and pull requests embedded.
    SELECT u.email, u.username, ...
    FROM users u
    LEFT JOIN ...

* The view is named after the file (`views/user_profile.sql` -> `user_profile`), queryable by that
  name in `lakemv query`; its Iceberg table is `<catalog>.views.<name>` and its change feed
  `<catalog>.views.<name>__changes`.
* `@key` (required) lists the output columns that identify a row, comma separated. Every other
  `-- ...` line is an ordinary comment; an unknown `@directive` is an error.
* `@sink` (optional) publishes the view as data products, fed from its change feed: `kafka` (a
  compacted topic `<prefix>.<view>`, exactly once) and/or `delta` (a Delta table with Change Data
  Feed), e.g. `-- @sink: kafka, delta` (`lakemv.spark.sinks.products`; settings can declare sinks too).
* `@enrich` (optional) chooses how a view of events joined with tables follows those tables:
  `table_table` (the default) re-enriches an event's row whenever a row it joins changes;
  `as_of_processing` enriches each event once, with the table rows current when its batch is
  processed, and never again (DDIA's stream-table join; `lakemv.core.planner` checks the key is the event's).
* `@freshness` (optional) is the view's freshness budget, e.g. `-- @freshness: 30 seconds` (Flink's
  FRESHNESS, Snowflake's TARGET_LAG): the keys each batch reaches wait in the local state, and the
  view is maintained and committed about once per budget instead of every batch
  (`lakemv.core.batch.deferral`). Without it the view is maintained in every batch.
* The body is one SELECT (CTEs allowed) over declared source tables by plain name; it sees live rows
  only. The planner (`lakemv.core.planner`) decides whether it can be maintained incrementally.

Views are discovered in `LAKEMV_VIEWS_DIR` (default `views/`) and `LAKEMV_EXTRA_VIEWS_DIR`. Adding a
view is adding a file; no Python.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Literal

import sqlglot
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from sqlglot import exp
from sqlglot.errors import ParseError

from lakemv.catalog.declarations import IDENTIFIER, check_folder, read_definition
from lakemv.catalog.tables import CHANGES_SUFFIX
from lakemv.core.durations import parse_duration
from lakemv.core.errors import ConfigError, ViewDefinitionError
from lakemv.core.planner.timewindows import rename_calls, rewrite_windows

DIRECTIVE = re.compile(r"^--\s*@(?P<name>[A-Za-z_]+)\s*:?\s*(?P<value>.*?)\s*$")
DIRECTIVES = ("key", "description", "sink", "enrich", "freshness")
ENRICHMENTS = ("table_table", "as_of_processing")
SINK_KINDS = ("kafka", "delta")


class ViewDefinition(BaseModel):
    """A parsed view definition: name, key columns and the SQL text (still unplanned)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=IDENTIFIER)
    key: tuple[str, ...] = Field(min_length=1)
    sql: str = Field(min_length=1)
    description: str | None = None
    location: str | None = None
    sinks: tuple[str, ...] = ()  # data products: `kafka`, `delta` (lakemv.spark.sinks.products)
    enrich: Literal["table_table", "as_of_processing"] = "table_table"
    freshness: int | None = Field(default=None, gt=0)  # the freshness budget, microseconds (None: every batch)

    @field_validator("name")
    @classmethod
    def _not_a_feed_name(cls, value: str) -> str:
        if value.endswith(CHANGES_SUFFIX):
            raise ValueError(f"a view name may not end in {CHANGES_SUFFIX!r} (reserved for change feeds)")
        return value

    @field_validator("key")
    @classmethod
    def _key_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for column in value:
            if not re.match(IDENTIFIER, column):
                raise ValueError(f"key column {column!r} is not a lower-case identifier")
        if len(set(value)) != len(value):
            raise ValueError("key lists a column twice")
        return value

    @property
    def fingerprint(self) -> str:
        """Identifies the definition's meaning: a new fingerprint means the view is rebuilt."""
        normal = sqlglot.parse_one(self.sql, dialect="spark").sql(dialect="spark")
        semantics = "" if self.enrich == "table_table" else f"|{self.enrich}"
        return hashlib.sha256(f"{self.key}|{normal}{semantics}".encode()).hexdigest()[:16]


def parse_view(text: str, name: str, location: str | None = None) -> ViewDefinition:
    """Parse a definition file's text; a missing key, bad SQL or two statements raise ViewDefinitionError."""
    directives: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        match = DIRECTIVE.match(line.strip())
        if not match:
            continue
        directive = match["name"].lower()
        if directive not in DIRECTIVES:
            raise ViewDefinitionError(
                name, f"line {number}: unknown directive @{directive}; known: {', '.join('@' + d for d in DIRECTIVES)}"
            )
        if directive in directives:
            raise ViewDefinitionError(name, f"line {number}: @{directive} is given twice")
        directives[directive] = match["value"]
    if "key" not in directives:
        raise ViewDefinitionError(name, "no key: add a header line such as `-- @key: email` (comma-separate several)")
    try:
        statements = [s for s in sqlglot.parse(rename_calls(text), dialect="spark") if s is not None]
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        detail = first.get("description") or str(exc).splitlines()[0]
        near = first.get("highlight")
        raise ViewDefinitionError(name, f"SQL does not parse: {detail}", near) from None
    if len(statements) != 1:
        raise ViewDefinitionError(name, f"expected exactly one SELECT statement, found {len(statements)}")
    if not isinstance(statements[0], exp.Query):
        raise ViewDefinitionError(name, "the body must be a SELECT query", statements[0].sql(dialect="spark")[:80])
    body = "\n".join(line for line in text.splitlines() if not DIRECTIVE.match(line.strip())).strip().rstrip(";")
    rewritten = rewrite_windows(name, statements[0])
    if rewritten.sql(dialect="spark") != statements[0].sql(dialect="spark"):
        body = rewritten.sql(dialect="spark", comments=False)  # window() as arithmetic (lakemv.core.planner.timewindows)
    key = tuple(part.strip().lower() for part in directives["key"].split(",") if part.strip())
    sinks = tuple(part.strip().lower() for part in directives.get("sink", "").split(",") if part.strip())
    unknown = [s for s in sinks if s not in SINK_KINDS]
    if unknown:
        raise ViewDefinitionError(name, f"@sink: unknown sink {unknown[0]!r}; known: {', '.join(SINK_KINDS)}")
    enrich = directives.get("enrich", "table_table").strip().lower()
    if enrich not in ENRICHMENTS:
        raise ViewDefinitionError(name, f"@enrich: unknown semantics {enrich!r}; known: {', '.join(ENRICHMENTS)}")
    freshness = None
    if directives.get("freshness"):
        try:
            freshness = parse_duration(directives["freshness"])
        except ValueError as exc:
            raise ViewDefinitionError(name, f"@freshness: {exc}") from None
        if freshness <= 0:
            raise ViewDefinitionError(name, "@freshness: the budget must be longer than zero")
    try:
        return ViewDefinition(
            name=name, key=key, sql=body, description=directives.get("description") or None, location=location,
            sinks=tuple(dict.fromkeys(sinks)), enrich=enrich, freshness=freshness,
        )  # fmt: skip
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ViewDefinitionError(name, f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None


class ViewRegistry(Mapping[str, ViewDefinition]):
    """All view definitions by name."""

    def __init__(self, views: Iterable[ViewDefinition]):
        self._views: dict[str, ViewDefinition] = {}
        for view in views:
            if view.name in self._views:
                raise ConfigError(
                    f"view {view.name!r} is defined twice ({self._views[view.name].location} and {view.location})"
                )
            self._views[view.name] = view

    def __getitem__(self, name: str) -> ViewDefinition:
        return self._views[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._views)

    def __len__(self) -> int:
        return len(self._views)

    def __repr__(self) -> str:
        return f"ViewRegistry({', '.join(self._views)})"


def load_views(dirs: Iterable[Path]) -> ViewRegistry:
    """Load every `*.sql` definition from the given folders (a missing folder is an error)."""
    views = []
    for folder in dirs:
        check_folder(folder, "views folder")
        for path in sorted(folder.glob("*.sql")):
            views.append(parse_view(read_definition(path), path.stem, str(path)))
    return ViewRegistry(views)
