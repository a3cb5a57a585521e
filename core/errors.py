"""The small error hierarchy every lakemv layer raises; the CLI turns these into one red line."""

from __future__ import annotations

import re

# What a credential looks like inside a message: a URL's password, a JSON or `key=value` setting whose
# name says secret, password, token, jaas or credential.
_SECRETS = (
    (re.compile(r"(://[^:/@\s'\"]+:)[^@\s'\"]+@"), r"\1****@"),
    (re.compile(r"""((?:secret|password|passwd|token|jaas|credential)[\w.-]*["']?\s*[:=]\s*)("[^"]*"|'[^']*'|[^\s,;}'"]+)""", re.I), r"\1****"),
)


def redact(text: str) -> str:
    """`text` with credentials masked, for any message, log line or echo of a setting."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


class LakemvError(Exception):
    """Base of every error lakemv raises on purpose (a user mistake or an expected failure)."""


class ConfigError(LakemvError):
    """A setting or declaration is invalid; `location` says where it came from."""

    def __init__(self, message: str, location: str | None = None):
        self.location = location
        super().__init__(f"{location}: {message}" if location else message)


class ViewDefinitionError(LakemvError):
    """A view definition is invalid or outside the incrementally maintainable class.

    `fragment` is the piece of SQL that breaks it, so the message can point at it.
    """

    def __init__(self, view: str, message: str, fragment: str | None = None):
        self.view = view
        self.fragment = fragment
        self.reason = message
        where = f" in `{fragment}`" if fragment else ""
        super().__init__(f"view {view}{where}: {message}")


class KeySpansTables(ViewDefinitionError):
    """The view's key columns come from several tables' rows (`lakemv.core.planner.grain` may keep it at
    its rows' grain instead)."""


class EnvelopeError(LakemvError):
    """A change record is not a usable Debezium envelope; it goes to the dead-letter table."""


class QueryError(LakemvError):
    """An ad-hoc query failed (bad SQL, unknown table)."""


class CommitConflict(LakemvError):
    """A concurrent Iceberg commit won the race; transient, the caller retries."""


class TablesRewritten(LakemvError):
    """Views' tables were rewritten by another writer (a compaction) since lakemv read where their rows
    live: a batch's deletes would miss, so its commits for them fail; their places must be read again."""

    def __init__(self, views: list[str], others_committed: bool = False):
        landed = "the batch's other views committed" if others_committed else "no view of the batch committed"
        super().__init__(f"the tables of {', '.join(views)} were rewritten since their rows' places were read ({landed}); read them again (seed)")
        self.views, self.others_committed = views, others_committed
