"""MkDocs hooks (mkdocs.yml): the settings reference, generated from the settings fields' descriptions.

`<!-- settings -->` in a page becomes a table of every `LAKEMV_` variable: its default and meaning, read
from `lakemv.catalog.settings.LakeSettings`, so the manual cannot drift from the code.
"""

from __future__ import annotations

from pathlib import Path

from pydantic_core import PydanticUndefined

from lakemv.catalog.settings import PROJECT_ROOT, LakeSettings

MARK = "<!-- settings -->"


def _default(value: object) -> str:
    if value is None or value == () or value == "" or value is PydanticUndefined:
        return "—"
    if isinstance(value, Path):
        value = value.relative_to(PROJECT_ROOT) if value.is_relative_to(PROJECT_ROOT) else value
        return f"`{value}`"
    if isinstance(value, tuple):
        return ", ".join(_default(v) for v in value)
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def settings_table() -> str:
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in LakeSettings.model_fields.items():
        meaning = " ".join((field.description or "").split()).replace("|", "\\|")
        rows.append(f"| `LAKEMV_{name.upper()}` | {_default(field.default)} | {meaning} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ANN001, ARG001 - MkDocs' hook signature
    return markdown.replace(MARK, settings_table()) if MARK in markdown else markdown
