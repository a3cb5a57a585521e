"""How micro-batches become units (landing files, Kafka with and without source transactions), and the
one loop that applies them: pure, with the transaction gates in a temporary folder."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from lakemv.catalog.storage import as_location
from lakemv.core.batch.journal import BatchRef
from lakemv.core.batch.units import KafkaCutter, Unit, UnitLoop, file_units
from tests.unit.test_transactions import COLLECTIONS, begin, change, end

TABLES = {"github.public.users": "users", "github.public.stars": "stars", "page_views": "page_views"}
TX_TOPIC = "github.transaction"


def _rows(*records: tuple[str, str | None]) -> pa.Table:
    """Kafka rows as Spark's source hands them: topic, partition, offset, value (bytes)."""
    return pa.table(
        {
            "topic": [t for t, _ in records],
            "partition": pa.array([0] * len(records), pa.int32()),
            "offset": pa.array(range(len(records)), pa.int64()),
            "value": pa.array([None if v is None else v.encode() for _, v in records], pa.binary()),
        }
    )


def _data(table: str, txid: str | None, order: int) -> tuple[str, str]:
    return f"github.public.{table}", change(table, txid, order).value


def _cutter(tmp_path, transactions: bool = True, size: int = 100, reports: list | None = None) -> KafkaCutter:
    gates = as_location(tmp_path / "gates")
    on_gate = reports.append if reports is not None else None
    return KafkaCutter(TABLES, COLLECTIONS, TX_TOPIC if transactions else None, {"page_views"}, gates, size, on_gate)


def _texts(units: list[Unit]) -> list[list[str | None]]:
    return [[json.loads(text)["after"]["id"] if text else None for text, _ in u.lines] for u in units]


def test_file_units_are_bounded_and_the_first_carries_the_skips():
    values = [b'{"a": 1}', b'{"a": 2}', b"\xff not utf-8", b'{"a": 4}', b'{"a": 5}']
    units = file_units(values, [f"f{i}" for i in range(5)], 2, {"empty file": 1})
    assert [len(u.lines) for u in units] == [2, 2, 1]
    assert [u.skips for u in units] == [{"empty file": 1}, None, None]
    assert units[1].lines[0] == ("\udcff not utf-8", "f2")  # its bytes kept, to become a dead letter with its reason


def test_a_batch_of_no_lines_is_one_unit_so_its_skips_are_recorded():
    assert file_units([], [], 100, {"file gone before it was read": 2}) == [Unit([], {"file gone before it was read": 2})]


def test_without_transactions_any_record_ends_a_unit(tmp_path):
    units = _cutter(tmp_path, transactions=False, size=2).units(_rows(*(_data("users", "tx1", i) for i in range(1, 6))), 0)
    assert _texts(units) == [[1, 2], [3, 4], [5]]
    assert units[0].lines[0][1] == "kafka:/users/github.public.users@0:0"


def test_a_transaction_is_held_until_its_end_then_applied_whole_and_alone(tmp_path):
    reports: list = []
    first = _cutter(tmp_path, size=1, reports=reports).units(_rows((TX_TOPIC, begin("tx1")), _data("users", "tx1", 1)), 0)
    assert first == [] and reports[-1].held == 1
    # the next batch, by a new cutter as after a restart: the held change comes back with its END
    rows = _rows(_data("stars", "tx1", 2), (TX_TOPIC, end("tx1", {"public.users": 1, "public.stars": 1})))
    units = _cutter(tmp_path, size=1, reports=reports).units(rows, 1)
    assert [len(u.lines) for u in units] == [2]  # larger than the unit size, never split
    assert reports[-1].held == 0
    mode = json.loads((tmp_path / "gates" / "mode.json").read_text())
    assert mode["mode"] == "whole transactions" and mode["held_changes"] == 0


def test_a_replayed_batch_is_cut_the_same(tmp_path):
    rows = _rows((TX_TOPIC, begin("tx1")), _data("users", "tx1", 1), _data("users", "tx1", 2),
                 (TX_TOPIC, end("tx1", {"public.users": 2})), (TX_TOPIC, begin("tx2")), _data("users", "tx2", 3))  # fmt: skip
    cut = _cutter(tmp_path, size=1)
    assert _texts(cut.units(rows, 0)) == [[1, 2]]
    assert _texts(cut.units(rows, 0)) == [[1, 2]]  # tx2 is held again, not twice


def test_event_streams_pass_the_gate_after_the_changes_it_releases(tmp_path):
    view = ("page_views", json.dumps({"after": {"id": 9}}))
    units = _cutter(tmp_path, size=1).units(_rows(view, (TX_TOPIC, begin("tx1")), _data("users", "tx1", 1)), 0)
    assert _texts(units) == [[9]]  # the users change waits for its END; the event does not


def test_switching_transactions_off_applies_what_was_held_first(tmp_path):
    assert _cutter(tmp_path).units(_rows((TX_TOPIC, begin("tx1")), _data("users", "tx1", 1)), 0) == []
    units = _cutter(tmp_path, transactions=False, size=1).units(_rows(_data("users", None, 2)), 1)
    assert _texts(units) == [[1], [2]]


@pytest.mark.parametrize("count", [0, 1, 3])
def test_the_loop_applies_units_in_order_with_their_place_in_the_batch(count):
    calls, after = [], []
    ids = iter(["stream-a", "stream-b"])

    def process(ref, lines, skips, *, last, more):
        calls.append((ref, lines, skips, last, more))
        return f"result {ref.chunk}"

    loop = UnitLoop(process, lambda: next(ids), after.append)
    batch = [Unit([("x", "f")], {"empty file": 1} if i == 0 else None) for i in range(count)]
    loop.run(7, batch)
    loop.run(8, batch[:1], more=True)  # more of a backlog follows batch 8
    assert calls[:count] == [(BatchRef("stream-a", 7, i), [("x", "f")], batch[i].skips, i == count - 1, False) for i in range(count)]
    assert [more for *_, more in calls[count:]] == ([True] if count else [])
    assert all(ref.stream == "stream-a" for ref, *_ in calls)  # the stream's id is read once
    assert after == [f"result {i}" for i in range(count)] + (["result 0"] if count else [])
