"""The planner's working state: the view, its sources, and what has been collected from its SQL."""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from lakemv.catalog.declarations import SourceTable
from lakemv.core.errors import ViewDefinitionError
from lakemv.core.planner.definitions import ViewDefinition
from lakemv.core.planner.model import Occurrence
from lakemv.core.planner.sqltools import _short


class _PlannerState:
    """What every planning stage reads and adds to; `fail` builds the error naming a fragment."""

    def __init__(self, definition: ViewDefinition, sources: Mapping[str, SourceTable]):
        self.definition = definition
        self.sources = sources
        self.occurrences: list[Occurrence] = []
        self.occ_of: dict[int, int] = {}  # id(exp.Table) -> occurrence id
        self.occ_scope: dict[int, Scope] = {}
        self.edges: dict[tuple[int, int], list[tuple[str, str, str, str]]] = {}  # (left SQL, right SQL, operator, fragment)
        self.problems: dict[int, list[str]] = {}
        self.scope_of_select: dict[int, Scope] = {}

    def fail(self, message: str, node: exp.Expression | str | None = None, kind: type[ViewDefinitionError] = ViewDefinitionError) -> ViewDefinitionError:
        fragment = node if isinstance(node, str) or node is None else _short(node)
        return kind(self.definition.name, message, fragment)
