"""No poison pill: any bytes, and any JSON shaped more or less like an envelope, end as a change, a
counted skip or a dead letter with a reason - never an exception that would stop the stream. Pure
Python (the parse every unit goes through); hypothesis searches the inputs."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakemv.core.cdc.changeset import build_changeset, decode_lines
from lakemv.core.cdc.unavailable import PLACEHOLDER

FILES = [f"file:///landing/{t}/part.json" for t in ("users", "repos", "stars", "pull_requests", "payment_info", "nope")]


def _accounted(batch, lines: int) -> None:
    """Every line is exactly one of: an event (a change, or a TRUNCATE), a counted skip, a dead letter."""
    assert batch.events + sum(batch.skipped.values()) + len(batch.dead_letters) == lines, (batch.events, batch.skipped, batch.dead_letters)
    for letter in batch.dead_letters:
        assert letter.reason and isinstance(letter.raw, str)
        letter.raw.encode("utf-8")  # the dead-letter table stores it: valid text, whatever came in


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.binary(max_size=300), st.sampled_from(FILES)), max_size=20))
def test_any_bytes_in_any_line_never_stop_the_batch(raw):
    lines = list(zip(decode_lines([b for b, _ in raw]), [f for _, f in raw], strict=True))
    batch = build_changeset(lines, _sources(), lookup=lambda table, keys: {}, applied=lambda: 0, live_keys=lambda table: [])
    _accounted(batch, len(lines))


_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=True),
    st.text(max_size=12), st.just(PLACEHOLDER), st.just("2024-01-15T10:30:00Z"), st.just("AeJA"),
)  # fmt: skip
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)
_columns = st.sampled_from(["id", "email", "username", "registered_at", "name", "owner", "description", "star_count",
                            "fork_count", "created_at", "updated_at", "repo_name", "repo_owner", "user_id", "verified", "new_col"])  # fmt: skip
_images = st.one_of(st.none(), _values, st.dictionaries(_columns, _values, max_size=8))
_sources_block = st.one_of(
    st.none(), _values,
    st.fixed_dictionaries({}, optional={"lsn": _scalars, "ts_ms": _scalars, "snapshot": st.sampled_from(["incremental", "true", "last"])}),
)  # fmt: skip
_envelopes = st.fixed_dictionaries(
    {},
    optional={"op": st.one_of(st.sampled_from(["c", "r", "u", "d", "t", "m"]), _scalars), "before": _images, "after": _images,
              "source": _sources_block, "ts_ms": _scalars},
)  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_envelopes, st.booleans(), st.sampled_from(FILES)), max_size=15))
def test_any_envelope_ends_as_a_change_a_skip_or_a_dead_letter(envelopes):
    lines = []
    for envelope, wrapped, file in envelopes:
        value = {"schema": {"type": "struct", "fields": []}, "payload": envelope} if wrapped else envelope
        lines.append((json.dumps(value, allow_nan=True), file))
    batch = build_changeset(lines, _sources(), lookup=lambda table, keys: {}, applied=lambda: 0, live_keys=lambda table: [])
    _accounted(batch, len(lines))
    for table, changes in batch.changes.items():
        for change in changes:
            assert not change.unavailable, "a placeholder never reaches a mirror"
            assert change.row is None or PLACEHOLDER not in change.row


_SOURCES = None


def _sources():
    global _SOURCES
    if _SOURCES is None:
        from lakemv.catalog.declarations import load_sources
        from lakemv.catalog.settings import LakeSettings

        _SOURCES = load_sources(LakeSettings().sources_dirs)
    return _SOURCES
