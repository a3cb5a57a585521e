"""Envelope parsing and value coercion rules (pure Python, no JVM)."""

from __future__ import annotations

import json

import pytest

from lakemv.core.cdc import envelope as envelope_module
from lakemv.core.cdc.coerce import iso_to_micros
from lakemv.core.cdc.envelope import Change, Skip, parse_envelope
from lakemv.core.errors import EnvelopeError

USER = {"id": 7, "email": "a@x.io", "username": "ann", "registered_at": 1_700_000_000_123_456}


def line(op="c", before=None, after=None, lsn=100, ts_ms=1_700_000_000_000, wrapped=False, **extra) -> str:
    payload = {"op": op, "before": before, "after": after, "source": {"lsn": lsn, "ts_ms": ts_ms}, "ts_ms": ts_ms, **extra}
    return json.dumps({"schema": {"type": "struct"}, "payload": payload} if wrapped else payload)


@pytest.mark.parametrize("op", ["c", "r", "u"])
def test_create_read_update_carry_the_after_image(sources, op):
    change = parse_envelope(line(op, after=USER), sources["users"])
    assert change == Change("users", op, ("a@x.io",), 100, 1_700_000_000_000, (7, "a@x.io", "ann", 1_700_000_000_123_456))


def test_schema_wrapper_is_unwrapped(sources):
    assert parse_envelope(line(after=USER, wrapped=True), sources["users"]) == parse_envelope(line(after=USER), sources["users"])


def test_update_with_null_before_needs_only_after(sources):
    change = parse_envelope(line("u", before=None, after=USER), sources["users"])
    assert change.row[2] == "ann" and not change.is_delete


def test_key_only_delete(sources):
    change = parse_envelope(line("d", before={"email": "a@x.io"}, after=None), sources["users"])
    assert change.is_delete and change.key == ("a@x.io",) and change.row is None


def test_composite_key_in_declared_order(sources):
    after = {"username": "ann", "repo_name": "lake", "repo_owner": "bob", "created_at": 1}
    assert parse_envelope(line(after=after), sources["stars"]).key == ("ann", "lake", "bob")


def test_missing_non_key_fields_become_null(sources):
    change = parse_envelope(line(after={"email": "a@x.io"}), sources["users"])
    assert change.row == (None, "a@x.io", None, None)


def test_position_falls_back_to_ts_ms(sources):
    raw = json.dumps({"op": "c", "after": USER, "source": {"ts_ms": 55}})
    assert parse_envelope(raw, sources["users"]).position == 55


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("{not json", "malformed JSON"),
        ("[1, 2]", "expected a JSON object, found list"),
        ('"just a string"', "expected a JSON object, found str"),
        (json.dumps({"after": USER, "source": {"lsn": 1}}), "no 'op' field"),
        (line("x", after=USER), "unknown op 'x'"),
        (line("m", after=None), "unknown op 'm'"),  # a logical decoding message (its own topic; never a table's)
        (line("c", after=None), "op 'c' needs an object in 'after'"),
        (line("d", before=None), "op 'd' needs an object in 'before'"),
        (line(after={**USER, "email": None}), "missing primary-key field 'email'"),
        (line("d", before={"id": 7}), "missing primary-key field 'email' in 'before'"),
        (json.dumps({"op": "c", "after": USER, "source": {}}), "no source position"),
        (line(after=USER, lsn="12"), "source position source.lsn must be a non-negative integer"),
        (line(after={**USER, "id": "12x"}), "column 'id': expected BIGINT, got string '12x'"),
        (line(after={**USER, "id": "12"}), "column 'id': expected BIGINT, got string"),
        (line(after={**USER, "id": True}), "column 'id': expected BIGINT, got boolean"),
        (line(after={**USER, "id": 2**64}), "column 'id': expected BIGINT"),
        (line(after={**USER, "username": 5}), "column 'username': expected STRING, got integer"),
        (line(after={**USER, "registered_at": "yesterday"}), "column 'registered_at': expected TIMESTAMP"),
        (line(after={**USER, "registered_at": 10**20}), "outside years 0001-9999"),
        (line(after=USER, ts_ms=-5), "source.ts_ms must be epoch millis"),
    ],
)
def test_bad_input_raises_envelope_error_with_reason(sources, raw, reason):
    with pytest.raises(EnvelopeError, match=None) as info:
        parse_envelope(raw, sources["users"])
    assert reason in str(info.value)


@pytest.mark.parametrize(("raw", "reason"), [("", "blank line"), ("   ", "blank line"), ("null", "tombstone (null value)")])
def test_blank_lines_and_kafka_tombstones_are_skipped(sources, raw, reason):
    assert parse_envelope(raw, sources["users"]) == Skip(reason)


def test_wrapped_null_payload_is_a_tombstone(sources):
    assert parse_envelope('{"schema": null, "payload": null}', sources["users"]) == Skip("tombstone (null payload)")


# ---- timestamps -------------------------------------------------------------------------------------
INSTANT = 1_709_294_400_000_000  # 2024-03-01T12:00:00Z


@pytest.mark.parametrize(
    ("table", "column", "value"),
    [
        ("users", "registered_at", INSTANT),  # micros
        ("repos", "created_at", INSTANT // 1000),  # millis
        ("pull_requests", "created_at", "2024-03-01T12:00:00Z"),  # ISO, Z
        ("pull_requests", "created_at", "2024-03-01T14:00:00+02:00"),  # ISO with offset -> UTC
        ("pull_requests", "created_at", "2024-03-01T12:00:00"),  # naive ISO means UTC
        ("users", "registered_at", "2024-03-01T12:00:00.000000000Z"),  # nanosecond fraction truncated
    ],
)
def test_timestamp_encodings_store_the_utc_instant(sources, table, column, value):
    source = sources[table]
    after = {c.name: None for c in source.columns} | {k: "k" for k in source.primary_key}
    if "index" in after:
        after["index"] = 1
    after[column] = value
    change = parse_envelope(line(after=after), source)
    assert change.row[source.column_names.index(column)] == INSTANT


def test_iso_timestamp_in_a_millis_column_is_accepted_but_integer_in_an_iso_column_is_not(sources):
    after = {"title": "t", "repo": "r", "repo_owner": "o", "index": 1, "created_at": INSTANT}
    with pytest.raises(EnvelopeError, match="expected TIMESTAMP as an ISO-8601 string"):
        parse_envelope(line(after=after), sources["pull_requests"])


def test_iso_to_micros_before_epoch():
    assert iso_to_micros("1969-12-31T23:59:59Z") == -1_000_000


def _outcome(text, source):
    try:
        return parse_envelope(text, source)
    except EnvelopeError as exc:
        return ("dead letter", str(exc))


def test_a_line_beginning_as_the_last_wrapped_one_is_read_as_a_whole_line_would_be(sources):
    """A wrapped line that begins with its table's last schema text has only its payload read: every line
    below gives what it gives read whole (compact, as Debezium writes it; each after a warm-up line)."""
    users = sources["users"]
    schema = {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": [
        {"field": "registered_at", "type": "int64", "name": "io.debezium.time.MicroTimestamp", "optional": True}]}]}
    head = '{"schema":' + json.dumps(schema, separators=(",", ":")) + ',"payload":'
    payload = json.dumps({"op": "c", "after": USER, "source": {"lsn": 5, "ts_ms": 1}}, separators=(",", ":"))
    big = payload.replace('"id":7', '"id":123456789012345678901234567890')
    lines = [
        head + payload + "}",
        head + payload.replace('"ann"', '"bob"') + "}",  # another payload, the same schema
        head + payload + ',"payload":null}',  # a second payload key: the last one wins, read whole
        head + payload + ',"extra":1}',  # a third key
        head + "null}",  # a tombstone
        head + "[1]}",  # not an object
        head + payload + "} ",  # trailing blank
        head + payload,  # cut short
        head + big + "}",  # an integer beyond 64 bits in the payload
        head + payload.replace('"ann"', '"\\ud800"') + "}",  # a lone surrogate orjson refuses
        head.replace("MicroTimestamp", "Timestamp") + payload + "}",  # another schema (millis)
        head.replace("Micro", "Nano").replace("true", "false") + payload + "}",  # another, of the same length (nanos)
        head + payload + "}",  # the first again
    ]
    for text in lines:
        envelope_module._BEGINNINGS.clear()
        alone = _outcome(text, users)
        _outcome(lines[0], users)  # the table's beginning is now lines[0]'s
        assert envelope_module._BEGINNINGS["users"][0] == head
        assert _outcome(text, users) == alone, text
    envelope_module._BEGINNINGS.clear()
    assert [_outcome(text, users) for text in lines] == [_outcome(text, users) for text in reversed(lines)][::-1]


def test_a_schema_holding_the_payload_key_in_its_text_is_not_taken_for_a_beginning(sources):
    schema = {"type": "struct", "parameters": {"x": "1", "payload": {"op": "d"}}, "fields": []}
    text = '{"schema":' + json.dumps(schema, separators=(",", ":")) + ',"payload":' + json.dumps(
        {"op": "c", "after": USER, "source": {"lsn": 5}}, separators=(",", ":")) + "}"
    envelope_module._BEGINNINGS.clear()
    assert parse_envelope(text, sources["users"]).row[2] == "ann"
    assert "users" not in envelope_module._BEGINNINGS and text.find(',"payload":') < text.find('"payload":{"op":"c"')
    assert parse_envelope(text, sources["users"]).row[2] == "ann"
