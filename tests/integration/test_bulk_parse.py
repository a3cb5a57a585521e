"""Spark's set-wise parse of a unit (lakemv.spark.bulk) gives exactly what the driver's line-by-line parse
gives: the same deduplicated mirror rows, dead letters with the same reasons, skips, event counts and
schema-drift notes - for generated workloads and for lines built to hit every rule's edge."""

from __future__ import annotations

import json
import random
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakemv.catalog.tables import mirror_arrow_schema
from lakemv.core.cdc.changeset import build_changeset, changes_to_arrow
from lakemv.spark.bulk import bulk_changeset, lines_frame
from lakemv.workload.debezium import connect_schema
from lakemv.workload.github import GitHubWorkload, WorkloadConfig
from tests.cdc import at

NOW = 1_700_000_000_000_000


def _canonical(table: pa.Table) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in table.to_pylist())


def assert_same_parse(spark, sources, lines: list[tuple[str, str]], max_line_chars: int | None = None, lookup=None, frame=None, applied=None) -> int:
    """Compare the two parses; returns how many lines Spark parsed itself."""
    expected = build_changeset(lines, sources, max_line_chars, lookup=lookup, applied=applied)
    got = bulk_changeset(frame or lines_frame(spark, lines), sources, 7, NOW, max_line_chars, lookup=lookup, applied=applied)
    for table in sorted(set(expected.changes) | set(got.rows)):
        want = changes_to_arrow(sources[table], expected.changes.get(table, []), 7, NOW)
        have = got.rows.get(table, mirror_arrow_schema(sources[table]).empty_table())
        assert _canonical(have) == _canonical(want), f"{table}: Spark's rows differ from the driver's"
    letters = lambda cs: sorted((d.raw, d.source_file, d.table, d.reason) for d in cs.dead_letters)  # noqa: E731
    assert letters(got) == letters(expected)
    assert got.skipped == expected.skipped
    assert got.events == expected.events
    assert got.new_fields == expected.new_fields
    assert got.absent == expected.absent
    return got.set_wise


def _generated(sources, seed: int, users: int, rounds: int) -> list[tuple[str, str]]:
    workload = GitHubWorkload(WorkloadConfig(users=users, seed=seed, rounds=rounds), sources)
    rng = random.Random(seed)
    schemas = {name: connect_schema(source) for name, source in sources.items()}
    lines = []
    for events in workload.rounds():
        for table, items in events.items():
            for event in items:
                value = {"schema": schemas[table], "payload": event} if rng.random() < 0.5 else event
                lines.append((json.dumps(value, separators=(",", ":")), at(table, f"r{rng.randrange(3)}.json")))
    rng.shuffle(lines)
    return lines


def test_a_generated_history_parses_the_same_in_spark(spark, sources):
    lines = _generated(sources, seed=3, users=150, rounds=4)
    assert len(lines) > 800
    assert assert_same_parse(spark, sources, lines) == len(lines)  # the generator's lines are all Spark's to parse


def test_unavailable_values_and_undecodable_bytes_are_the_drivers_and_parse_the_same(spark, sources):
    """Debezium's placeholder is filled from the previous image, which may be a line Spark vouches for;
    a line that is not UTF-8 is a dead letter, never a failed unit."""
    from pyspark.sql import functions as F

    from lakemv.core.cdc.changeset import decode_lines
    from lakemv.core.cdc.unavailable import PLACEHOLDER
    from lakemv.spark.bulk import Lines

    def repo(name, description, stars):
        after = {"name": name, "owner": "o", "description": description, "star_count": stars, "fork_count": 0, "created_at": 0, "updated_at": 0}
        return after

    def line(op, lsn, after, before=None):
        return json.dumps({"op": op, "before": before, "after": after, "source": {"lsn": lsn, "ts_ms": 0}}).encode()

    raw = [
        line("c", 1, repo("a", "long text", 1)),
        line("u", 2, repo("a", PLACEHOLDER, 2)),  # filled by the line before, which Spark could parse
        line("u", 3, repo("b", PLACEHOLDER, 5)),  # filled by the stored row
        line("u", 4, repo("z", PLACEHOLDER, 5)),  # nothing holds it: a dead letter
        line("d", 5, None, {"owner": "o", "name": "b"}),
        line("c", 5, repo("b2", PLACEHOLDER, 5)),  # the rename of b: b's values
        line("c", 6, repo("c", "plain", 1)),
        b'{"op": "c", "after": {"name": "caf\xe9"}}',
    ]
    files = [at("repos")] * len(raw)
    lines = list(zip(decode_lines(raw), files, strict=True))
    stored = {("o", "b"): ("b", "o", "kept", 4, 0, 0, 0)}
    lookup = lambda table, keys: {k: stored[k] for k in keys if k in stored}  # noqa: E731
    # An incremental snapshot's reads (no LSN) take their place after the lines before them, Spark's too.
    raw += [
        json.dumps({"op": "r", "after": repo("c", "as read", 9), "source": {"lsn": None, "ts_ms": 10**12, "snapshot": "incremental"}}).encode(),
        line("u", 3, repo("d", "d", 1)),
        json.dumps({"op": "r", "after": repo("d", "as read", 9), "source": {"ts_ms": 10**12, "snapshot": "incremental"}}).encode(),
        line("u", 7, repo("d", "after the read", 1)),
    ]
    files = [at("repos")] * len(raw)
    lines = list(zip(decode_lines(raw), files, strict=True))
    frame = spark.createDataFrame(pa.table({"value": pa.array(raw, pa.binary()), "file": files})).withColumn("value", F.col("value").cast("string"))
    assert_same_parse(spark, sources, lines, lookup=lookup, frame=Lines(frame), applied=lambda: 1)
    parsed = build_changeset(lines, sources, lookup=lookup, applied=lambda: 1)
    rows = {c.key: c.row for c in parsed.changes["repos"] if not c.is_delete}
    assert rows[("o", "a")][2] == "long text" and rows[("o", "b2")][2] == "kept" and ("o", "z") not in rows
    assert rows[("o", "c")][2] == "as read" and rows[("o", "d")][2] == "after the read"
    assert sorted(d.reason.split(":")[0] for d in parsed.dead_letters) == ["not valid UTF-8", "unavailable value in description"]


def test_edge_values_spark_vouches_for_parse_the_same(spark, sources):
    """Values at the edges of what the SQL accepts: each line is Spark's to parse, and still equal."""
    stamps = ["2024-02-29T12:00:00Z", "2024-01-01 10:11:12.5+01:30", "2024-01-01T10:11:12.1234567-05:00",
              "9999-12-31T23:59:59.999999Z", "0001-01-01T00:00:00Z", 253402300799999999, -62135596800000000, 0, -1]  # fmt: skip
    lines = [
        (json.dumps({"op": "c", "after": {"id": -(2**63), "email": f"e{i}@x", "username": "", "registered_at": stamp},
                     "source": {"lsn": i, "ts_ms": 0}}), at("users"))  # fmt: skip
        for i, stamp in enumerate(stamps)
    ]
    lines.append((json.dumps({"op": "d", "before": {"email": "e1@x", "id": "not checked on a delete"}, "source": {"lsn": 99}}), at("users")))
    lines.append((json.dumps({"op": "u", "after": {"id": 1, "email": "e2@x", "username": None, "registered_at": None}, "ts_ms": 5, "source": {"lsn": 1}}), at("users")))
    assert assert_same_parse(spark, sources, lines) == len(lines)


def test_what_sparks_json_reader_would_let_through_is_the_drivers(spark, sources):
    """Spark's JSON reader reads the first value of a text and ignores the rest, takes single quotes and
    NaN, and cannot tell a JSON null from an absent field: each such line is the driver's, and comes
    out as the driver says (most of them dead letters)."""
    good = {"op": "c", "after": {"id": 1, "email": "a@x", "username": "a", "registered_at": 0}, "source": {"lsn": 1, "ts_ms": 0}}
    text = json.dumps(good)
    wrapped = {"schema": connect_schema(sources["users"]), "payload": {**good, "source": {"lsn": 2, "ts_ms": 0}}}
    odd = [
        text + '{"op":"d"}',  # two objects on one line
        text + " x",
        text + '],"z":[1',
        text.replace('"', "'"),  # single quotes
        text.replace('"ts_ms": 0', '"ts_ms": 0, "xmin": NaN'),  # NaN where nothing reads it
        json.dumps({"schema": None, "payload": None, **good}),  # a wrapper whose payload is null
        json.dumps({"payload": None, **good}),  # a top-level payload key: the driver's to decide
        json.dumps({**wrapped, "schema": None}),
        json.dumps({**good, "source": {"lsn": "3", "ts_ms": 0}}),  # a position of the wrong type
        json.dumps({**good, "after": {**good["after"], "id": 1, "email": "b@x"}}).replace('"id": 1', '"id": 1, "id": 2'),
    ]
    lines = [(line, at("users")) for line in [text, json.dumps(wrapped), "  " + text + " \t", *odd]]
    assert assert_same_parse(spark, sources, lines) == 3  # only the three plain lines are Spark's


def test_what_the_readers_types_would_hide_is_the_drivers(spark, sources):
    """The JSON reader types an image by the declaration: a string column takes any value as its text, an
    absent field reads as null, an undeclared one is not read, a repeated key keeps its last value. The
    image's JSON kinds (`lakemv_json_kinds`) make each such line the driver's; a key spelled with an
    escape and a deletion's non-key fields of any type stay Spark's."""
    after = {"id": 1, "email": "a@x", "username": "a", "registered_at": 0}
    line = lambda **image: json.dumps({"op": "c", "after": {**after, **image}, "source": {"lsn": 1, "ts_ms": 0}})  # noqa: E731
    delete = lambda **image: json.dumps({"op": "d", "before": {"email": "a@x", **image}, "source": {"lsn": 2, "ts_ms": 0}})  # noqa: E731
    drop = json.loads(line())
    del drop["after"]["username"]
    schema = connect_schema(sources["users"])
    odd = [
        json.dumps(drop),  # a declared field absent
        line(extra=1),  # an undeclared field
        line().replace('"email": "a@x"', '"email": "a@x", "email": "b@x"'),  # a repeated key
        line(id=1.0),
        line().replace('"id": 1', '"id": 1e3'),
        line(id=2**64),
        line(username=5),  # a number in a text column
        line(username=["a"]),
        line(username={"a": 1}),
        line(registered_at="1700000000000000"),  # digits in text where the encoding is a number
        line(registered_at=True),
        line(email=None),  # a null key
        delete(username="__debezium_unavailable_value"),
        delete(username=["__debezium_unavailable_value"]),
        delete(id=[1]),
        delete(email=5),
        json.dumps({"schema": schema, "payload": json.loads(line()), "payload ": 1}).replace('"payload ": 1', '"payload": ' + line(email="c@x")),
        # a null payload whose key is spelled with an escape, beside a null schema: a tombstone to the driver
        '{"schema":null,"p\\u0061yload":null,' + line(email="d@x")[1:],
        # half a surrogate pair escaped alone (a dead letter to the driver, "?" to Spark's reader), and a whole pair
        line(username="a\ud800b"), line(username="q").replace('"q"', '"\\uDC00"'), line(username="\U0001f600"),
    ]
    spark_s = [
        line(),
        line().replace('"id"', '"\\u0069d"'),  # a key spelled with an escape
        delete(id="x", username=5, registered_at={"a": 1}),  # a deletion reads its key alone
        delete(extra={"a": 1}),
        line(username=None, registered_at=None),
    ]
    lines = [(text, at("users")) for text in [*spark_s, *odd]]
    assert assert_same_parse(spark, sources, lines) == len(spark_s)


# JSON values that probe each rule: types, ranges, the strict ISO form and what falls outside it.
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.sampled_from([0, -1, 1, 2**31 - 1, 2**31, -(2**31) - 1, 2**63 - 1, -(2**63), 253402300799999999, 253402300800000000, -62135596800000000, -62135596800000001]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
    st.sampled_from(
        [
            "2024-02-29T12:00:00Z", "2023-02-29T00:00:00Z", "2024-01-01 10:11:12.5+01:30", "2024-01-01T10:11:12.1234567-05:00",
            "2024-01-01T24:00:00", "2024-01-01T23:59:60Z", "2024-01-01T10:11:12+24:00", "2024-01-01T10:11:12+05:60",
            "0001-01-01T00:00:00Z", "0001-01-01T00:30:00+01:00", "9999-12-31T23:59:59.999999Z", "9999-12-31T23:59:59-01:00",
            " 2024-01-01T00:00:00Z", "2024-01-01", "2024-01-01T00:00", "2024-01-01T00:00:00.Z", "x@y", "12", "true", "",
        ]
    ),
)
_IMAGE_FIELDS = ("id", "email", "username", "registered_at", "extra")
_IMAGES = st.one_of(
    st.none(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.sampled_from(_IMAGE_FIELDS), _SCALARS, max_size=5),
    st.fixed_dictionaries({"id": _SCALARS, "email": _SCALARS, "username": _SCALARS, "registered_at": _SCALARS}),
)


@st.composite
def envelopes(draw) -> str:  # noqa: ANN001
    op = draw(st.one_of(st.sampled_from(["c", "r", "u", "d"]), _SCALARS))
    body: dict[str, Any] = {"op": op, "before": draw(_IMAGES), "after": draw(_IMAGES)}
    source = draw(st.one_of(st.none(), st.text(max_size=2), st.fixed_dictionaries({"lsn": _SCALARS, "ts_ms": _SCALARS})))
    if source is not None:
        body["source"] = source
    if draw(st.booleans()):
        body["ts_ms"] = draw(_SCALARS)
    for name in ("op", "before", "after"):
        if draw(st.integers(0, 9)) == 0:
            body.pop(name)
    shape = draw(st.sampled_from(["plain", "wrapped", "null payload", "text"]))
    if shape == "wrapped":
        return json.dumps({"schema": {"type": "struct"}, "payload": body})
    if shape == "null payload":
        return json.dumps({"schema": {}, "payload": None})
    if shape == "text":
        return draw(st.sampled_from(["", "  ", "null", "[1]", '{"op": "c"', "{}", '{"a":1,"a":2}']))
    return json.dumps(body)


# Each example is one Spark job (about a second now that only the tables a unit has lines of are
# planned): 15 examples of 10-120 lines.
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.tuples(envelopes(), st.sampled_from(["users", "users", "users", "nope"])), min_size=10, max_size=120))
def test_every_rule_gives_the_same_outcome_in_spark_and_in_the_driver(spark, sources, drawn):
    lines = [(text, at(folder)) for text, folder in drawn]
    assert_same_parse(spark, sources, lines, max_line_chars=200)


def test_a_connect_schema_that_says_another_encoding_is_decoded_as_it_says(spark, sources):
    """repos.created_at is declared `millis`; a message whose schema says MicroTimestamp is decoded as
    micros by the driver, so Spark must not vouch for it."""
    import copy

    from lakemv.workload.debezium import connect_schema, envelope

    schema = connect_schema(sources["repos"])
    row = {"name": "lake", "owner": "ann", "description": "d", "star_count": 1, "fork_count": 0,
           "created_at": 1_709_294_400_000_000, "updated_at": 1_709_294_400_000_000}  # fmt: skip
    agreeing = {"schema": schema, "payload": envelope(sources["repos"], "c", None, row, 11, 1_709_294_400_000)}
    schema = copy.deepcopy(schema)
    after = next(f for f in schema["fields"] if f["field"] == "after")
    created = next(f for f in after["fields"] if f["field"] == "created_at")
    created["name"] = "io.debezium.time.MicroTimestamp"  # the same field, now said to be micros
    disagreeing = {"schema": schema, "payload": {**agreeing["payload"], "after": {**agreeing["payload"]["after"],
                   "name": "lake2", "created_at": 1_709_294_400_000_123}}}  # fmt: skip
    lines = [(json.dumps(agreeing), "file:///landing/repos/a.json"), (json.dumps(disagreeing), "file:///landing/repos/a.json")]
    assert assert_same_parse(spark, sources, lines) == 1  # the second is the driver's: micros, as its schema says


def test_lines_that_begin_as_a_vouched_wrapped_line_have_only_their_payload_read(spark, sources, tmp_path):
    """A wrapped line whose `{"schema":...,"payload":` is a beginning the unit vouched for (its file's first
    line) has only its payload read; what follows the payload must be the wrapper's one `}`."""
    from pyspark.sql import functions as F

    from lakemv.spark.bulk import Lines, beginnings, unit_files

    schema = connect_schema(sources["users"])

    def payload(i: int, **extra: Any) -> dict:
        after = {"id": i, "email": f"u{i}@x", "username": f"u{i}", "registered_at": 1_700_000_000_000_000 + i}
        return {"op": "c", "before": None, "after": after, "source": {"lsn": 10 + i, "ts_ms": 1_700_000_000_000}, "ts_ms": 1_700_000_000_001, **extra}

    def wrapped(i: int) -> str:
        return json.dumps({"schema": schema, "payload": payload(i)}, separators=(",", ":"))

    head = wrapped(0)[: wrapped(0).index(',"payload":') + len(',"payload":')]
    body = json.dumps(payload(7), separators=(",", ":"))
    lines = [wrapped(i) for i in range(6)] + [
        head + body + ',"payload":' + json.dumps(payload(8)) + "}",  # a second payload: the driver reads the last
        head + body + ',"schema":{"fields":[]}}',  # a second schema
        head + "null}",  # a tombstone
        head + body + "}}",
        head + body,
        head + body + "} x",
        head + body.replace('"ts_ms":1700000000001', '"ts_ms":"5"') + "}",
        head + body + "}  ",
        head + json.dumps(payload(9, op="d", before={"id": 9, "email": "u9@x"})) + "}",
    ]
    folder = tmp_path / "landing" / "users"
    folder.mkdir(parents=True)
    (folder / "part-0.json").write_text("\n".join(lines) + "\n")
    frame = spark.read.text(str(folder)).select("value", F.input_file_name().alias("file"))
    assert beginnings(unit_files(Lines(frame)), sources)["users"] == [head]
    read = [(r["value"], r["file"]) for r in frame.collect()]
    assert assert_same_parse(spark, sources, read, frame=Lines(frame)) == 8  # the six, the spaced one and the delete


def test_ints_doubles_dates_and_nanos_at_their_edges_parse_the_same(spark, sources):
    """Types no shipped source declares, at the edges the SQL checks: an int's range, a double's
    integers past 64 bits and values past its range, a date's range, and nanoseconds down to the lowest
    64-bit value (floor division, as the driver's). Each edge inside is Spark's; each outside the driver's."""
    from lakemv.catalog.declarations import SourceRegistry, SourceTable

    table = SourceTable.model_validate(
        {
            "name": "measures",
            "primary_key": ["id"],
            "columns": [
                {"name": "id", "type": "bigint"},
                {"name": "n", "type": "int"},
                {"name": "x", "type": "double"},
                {"name": "d", "type": "date"},
                {"name": "t", "type": "timestamp", "encoding": "nanos"},
            ],
        }
    )
    registry = SourceRegistry([table])
    ids = iter(range(1, 100))

    def line(**values: Any) -> str:
        row = {"id": next(ids), "n": 1, "x": 1.5, "d": 0, "t": 0, **values}
        return json.dumps({"op": "c", "after": row, "source": {"lsn": row["id"], "ts_ms": 0}})

    inside = [
        line(n=2**31 - 1), line(n=-(2**31)), line(n=-0), line(x=-0.0), line(x=2**64), line(x=10**30), line(x=1e300),
        line(d=-719162), line(d=2932896), line(t=-(2**63)), line(t=-1500), line(t=1_700_000_000_123_456_789),
        json.dumps({"op": "d", "before": {"id": 7, "n": "x", "x": {"a": 1}, "d": None}, "source": {"lsn": 99}}),
    ]  # fmt: skip
    outside = [
        line(n=2**31), line(n=-(2**31) - 1), line(n=1.0), line(x=10**400), line(x="1.5"), line(d=2932897),
        line(d=-719163), line(d="1970-01-01"), line(t=2**63), line(t="0"), line(t=1.5),
    ]  # fmt: skip
    lines = [(text, at("measures")) for text in [*inside, *outside]]
    assert assert_same_parse(spark, registry, lines) == len(inside)
