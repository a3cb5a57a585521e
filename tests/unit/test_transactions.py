"""TransactionGate: whole source transactions only, released in commit order (pure Python, no JVM).

Values are shaped as Debezium 3.6 (PostgreSQL connector, pgoutput, JsonConverter) writes them: the
transaction topic's BEGIN/END events and data events with a `transaction` block, with and without
the `{"schema": ..., "payload": ...}` wrapper.
"""

from __future__ import annotations

import json

import pytest

from lakemv.core.cdc.transactions import GateReport, Record, TransactionGate, transaction_key, transaction_of

COLLECTIONS = ("public.users", "public.stars")
TS_MS = 1_700_000_000_000
_BOUNDARY_SCHEMA = {
    "type": "struct",
    "name": "io.debezium.connector.common.TransactionMetadataValue",
    "version": 1,
    "optional": False,
    "fields": [
        {"type": "string", "optional": False, "field": "status"},
        {"type": "string", "optional": False, "field": "id"},
        {"type": "int64", "optional": True, "field": "event_count"},
        {"type": "array", "optional": True, "field": "data_collections"},
        {"type": "int64", "optional": False, "field": "ts_ms"},
    ],
}
_offsets = iter(range(1_000_000))


def begin(txid: str, wrapped: bool = True) -> str:
    payload = {"status": "BEGIN", "id": txid, "event_count": None, "data_collections": None, "ts_ms": TS_MS}
    return json.dumps({"schema": _BOUNDARY_SCHEMA, "payload": payload} if wrapped else payload)


def end(txid: str, counts: dict[str, int], wrapped: bool = True) -> str:
    payload = {
        "status": "END",
        "id": txid,
        "event_count": sum(counts.values()),
        "data_collections": [{"data_collection": name, "event_count": n} for name, n in counts.items()],
        "ts_ms": TS_MS,
    }
    return json.dumps({"schema": _BOUNDARY_SCHEMA, "payload": payload} if wrapped else payload)


def change(table: str, txid: str | None, total_order: int, wrapped: bool = False, op: str = "c") -> Record:
    """A data event of `table` in transaction `txid` (None: no transaction block, e.g. a snapshot read)."""
    row = {"id": total_order, "email": f"user{total_order:07d}@example.com", "username": f"user{total_order:07d}"}
    payload = {
        "before": None if op != "d" else row,
        "after": row if op != "d" else None,
        "source": {"connector": "postgresql", "schema": "public", "table": table, "lsn": 26_445_688 + total_order, "ts_ms": TS_MS},
        "op": op,
        "ts_ms": TS_MS,
    }
    if txid is not None:
        payload["transaction"] = {"id": txid, "total_order": total_order, "data_collection_order": total_order}
    value = json.dumps({"schema": {"type": "struct", "optional": False}, "payload": payload} if wrapped else payload)
    offset = next(_offsets)
    return Record(f"kafka:/{table}/github.public.{table}@0:{offset}", table, value)


def tombstone(table: str) -> Record:
    return Record(f"kafka:/{table}/github.public.{table}@0:{next(_offsets)}", table, None)


def gate() -> TransactionGate:
    return TransactionGate(COLLECTIONS)


# ---- transaction ids ------------------------------------------------------------------------------------
def test_postgres_ids_are_the_txid_before_the_colon():
    assert transaction_key("728:26445688") == "728"
    assert transaction_key("728:26658336") == transaction_key("728:26498824") == "728"
    assert transaction_key(728) == "728"


@pytest.mark.parametrize(
    "txid",
    [
        "3E11FA47-71CA-11E1-9E33-C80AA9429562:23",  # MySQL GTID
        "00000025:00000d08:0025",  # SQL Server LSN
        "728",  # already a bare id
    ],
)
def test_other_connectors_ids_are_kept_whole(txid):
    assert transaction_key(txid) == txid


def test_transaction_of_reads_the_block_wrapped_or_bare():
    assert transaction_of(change("users", "728:26498824", 3).value)[:2] == ("728", 3)
    assert transaction_of(change("users", "728:26498824", 4, wrapped=True).value)[:2] == ("728", 4)
    assert transaction_of(change("users", None, 1).value) is None
    assert transaction_of(None) is None  # a tombstone
    assert transaction_of("{not json") is None


# ---- changes outside transactions ----------------------------------------------------------------------
def test_changes_without_a_transaction_block_pass_at_once():
    g = gate()
    records = [change("users", None, 1, op="r"), change("stars", None, 2, op="r", wrapped=True), tombstone("users")]
    ready, report = g.admit(records, [])
    assert ready == records
    assert report == GateReport(released=3, held=0, transactions=0, waiting=0, oldest_waiting=None)
    assert not g.held and not g.order


# ---- holding until complete -----------------------------------------------------------------------------
@pytest.mark.parametrize("wrapped", [True, False])
def test_transaction_is_held_until_its_end_and_all_changes_are_read(wrapped):
    g = gate()
    first, second = change("users", "728:26498824", 1, wrapped), change("stars", "728:26498900", 2, wrapped)

    ready, report = g.admit([first], [begin("728:26445688", wrapped)])
    assert ready == [] and report.held == 1 and report.waiting == 1 and report.oldest_waiting == "728"

    ready, report = g.admit([second], [])  # every change read, but no END yet
    assert ready == [] and report.held == 2

    ready, report = g.admit([], [end("728:26658336", {"public.users": 1, "public.stars": 1}, wrapped)])
    assert ready == [first, second]
    assert report == GateReport(released=2, held=0, transactions=1, waiting=0, oldest_waiting=None)


def test_end_read_before_the_last_changes_waits_for_them():
    g = gate()
    changes = [change("users", "728:26498824", n) for n in (1, 2, 3)]
    ready, _ = g.admit([], [begin("728:111"), end("728:222", {"public.users": 3})])
    assert ready == []
    ready, report = g.admit(changes[:2], [])
    assert ready == [] and report.held == 2 and report.waiting == 1
    ready, report = g.admit(changes[2:], [])
    assert ready == changes and report.transactions == 1 and report.waiting == 0


def test_changes_and_end_in_one_batch_release_at_once():
    g = gate()
    changes = [change("users", "728:26498824", 1), change("stars", "728:26498824", 2)]
    ready, report = g.admit(changes, [begin("728:26445688"), end("728:26658336", {"public.users": 1, "public.stars": 1})])
    assert ready == changes and report.transactions == 1


def test_end_counts_of_other_collections_are_not_waited_for():
    g = gate()
    ours = [change("users", "728:1", 1), change("stars", "728:1", 2)]
    counts = {"public.users": 1, "public.stars": 1, "public.repos": 287, "inventory.orders": 5}
    ready, report = g.admit(ours, [begin("728:0"), end("728:9", counts)])
    assert ready == ours and report.transactions == 1 and report.held == 0


def test_transaction_of_other_tables_only_releases_nothing_but_completes():
    g = gate()
    ready, report = g.admit([], [begin("730:1"), end("730:2", {"public.repos": 3})])
    assert ready == [] and report.transactions == 1 and report.waiting == 0


def test_measured_postgres_transaction_with_differing_lsn_parts_is_one_transaction():
    """BEGIN 728:26445688, changes 728:26445688 and 728:26498824, END 728:26658336 (measured)."""
    g = gate()
    users = [change("users", "728:26445688", n) for n in (1, 2)]
    stars = [change("stars", "728:26498824", n) for n in (3, 4, 5)]
    ready, _ = g.admit(users, [begin("728:26445688")])
    assert ready == []
    ready, report = g.admit(stars, [end("728:26658336", {"public.users": 2, "public.stars": 3, "public.repos": 100})])
    assert ready == users + stars
    assert report.transactions == 1 and not g.held


def test_non_postgres_ids_are_transactions_of_their_own():
    gtid = "3E11FA47-71CA-11E1-9E33-C80AA9429562:23"
    other = "3E11FA47-71CA-11E1-9E33-C80AA9429562:24"
    g = gate()
    first, second = change("users", gtid, 1), change("users", other, 1)
    ready, report = g.admit([first, second], [begin(gtid), begin(other), end(gtid, {"public.users": 1})])
    assert ready == [first]  # the GTID is not cut at its colon: the two are different transactions
    assert report.waiting == 1 and report.oldest_waiting == other
    ready, _ = g.admit([], [end(other, {"public.users": 1})])
    assert ready == [second]


# ---- duplicates and re-sends ----------------------------------------------------------------------------
def test_duplicate_deliveries_of_a_change_do_not_count_twice():
    g = gate()
    one = change("users", "728:5", 1)
    again = Record(one.origin + "-redelivered", one.table, one.value)
    ready, report = g.admit([one, again], [begin("728:1"), end("728:9", {"public.users": 2})])
    assert ready == []  # two records, but one distinct total_order of the two expected
    assert report.held == 2 and report.waiting == 1
    two = change("users", "728:5", 2)
    ready, report = g.admit([two], [])
    assert ready == [one, again, two]  # the duplicate is applied too: applying a change twice changes nothing
    assert report.transactions == 1


def test_re_sent_transaction_after_release_passes_at_once():
    g = gate()
    changes = [change("users", "728:5", 1), change("stars", "728:6", 2)]
    ready, _ = g.admit(changes, [begin("728:1"), end("728:9", {"public.users": 1, "public.stars": 1})])
    assert ready == changes
    # Kafka Connect restarted and sent the transaction again: no BEGIN/END needed, nothing held
    again = [change("users", "728:5", 1), change("stars", "728:6", 2)]
    ready, report = g.admit(again[:1], [begin("728:1")])
    assert ready == again[:1] and report.held == 0 and report.waiting == 0
    ready, report = g.admit(again[1:], [end("728:9", {"public.users": 1, "public.stars": 1})])
    assert ready == again[1:] and report.transactions == 0 and report.waiting == 0


# ---- commit order ---------------------------------------------------------------------------------------
def test_complete_later_transaction_waits_behind_an_incomplete_earlier_one():
    g = gate()
    early = [change("users", "728:10", 1), change("users", "728:10", 2)]
    late = [change("stars", "729:20", 1)]
    boundaries = [begin("728:1"), begin("729:2"), end("728:3", {"public.users": 2}), end("729:4", {"public.stars": 1})]
    ready, report = g.admit([early[0], *late], boundaries)
    assert ready == []  # 729 is complete, but 728 committed first and is not
    assert report == GateReport(released=0, held=2, transactions=0, waiting=2, oldest_waiting="728")
    ready, report = g.admit([early[1]], [])
    assert ready == [*early, *late]  # both, in commit order
    assert report == GateReport(released=3, held=0, transactions=2, waiting=0, oldest_waiting=None)


def test_release_follows_begin_order_not_read_order():
    g = gate()
    a, b = change("users", "801:1", 1), change("stars", "800:1", 1)
    ready, _ = g.admit([a, b], [begin("800:0"), begin("801:0"), end("801:9", {"public.users": 1})])
    assert ready == []
    ready, _ = g.admit([], [end("800:9", {"public.stars": 1})])
    assert ready == [b, a]


def test_untagged_changes_pass_while_a_transaction_is_held():
    g = gate()
    held = change("users", "728:1", 1)
    snapshot = change("users", None, 2, op="r")
    ready, report = g.admit([held, snapshot], [begin("728:0")])
    assert ready == [snapshot] and report.released == 1 and report.held == 1


def test_primary_key_change_is_released_whole():
    """A primary-key UPDATE is delete + tombstone + create: the delete and create are held together;
    the tombstone has no transaction block and passes (it is a skip for the parser anyway)."""
    g = gate()
    delete, grave, create = change("users", "731:1", 1, op="d"), tombstone("users"), change("users", "731:1", 2)
    ready, _ = g.admit([delete, grave], [begin("731:0")])
    assert ready == [grave]
    ready, _ = g.admit([create], [end("731:5", {"public.users": 2})])
    assert ready == [delete, create]


def test_report_counts_released_held_waiting_and_transactions():
    g = gate()
    untagged = change("users", None, 9, op="r")
    done = [change("users", "740:1", 1), change("stars", "740:1", 2)]
    partial = [change("users", "741:1", 1)]
    boundaries = [begin("740:0"), end("740:9", {"public.users": 1, "public.stars": 1}), begin("741:0"), end("741:9", {"public.users": 3})]
    ready, report = g.admit([untagged, *done, *partial], boundaries)
    assert ready == [untagged, *done]
    assert report.released == 3
    assert report.held == 1
    assert report.transactions == 1
    assert report.waiting == 1
    assert report.oldest_waiting == "741"


def test_changes_whose_begin_is_not_yet_read_are_waiting():
    g = gate()
    ready, report = g.admit([change("users", "750:1", 1)], [])
    assert ready == [] and report.held == 1 and report.waiting == 1 and report.oldest_waiting == "750"
    ready, report = g.admit([], [begin("750:0"), end("750:2", {"public.users": 1})])
    assert len(ready) == 1 and report.transactions == 1


def test_boundaries_that_are_not_begin_or_end_are_ignored():
    g = gate()
    ready, report = g.admit([], [None, "", "{not json", json.dumps({"status": "BEGIN"}), json.dumps({"id": "1:1", "status": "OTHER"})])
    assert ready == [] and report == GateReport() and not g.seen_metadata


# ---- persistence ----------------------------------------------------------------------------------------
def _half_done_gate() -> tuple[TransactionGate, list[Record]]:
    g = gate()
    first = change("users", "728:1", 1)
    g.admit([change("users", "700:1", 1)], [begin("700:0"), end("700:2", {"public.users": 1})])  # released
    g.admit([first], [begin("728:0"), end("728:9", {"public.users": 2})])
    return g, [first]


def test_to_json_from_json_round_trip_keeps_what_is_held():
    g, held = _half_done_gate()
    data = json.loads(json.dumps(g.to_json()))
    restored = TransactionGate.from_json(data, COLLECTIONS)
    assert restored.to_json() == g.to_json()
    assert restored.collections == frozenset(COLLECTIONS)
    assert restored.seen_metadata
    # the restored gate goes on: the rest of 728 releases what was held before
    rest = change("users", "728:1", 2)
    ready, report = restored.admit([rest], [])
    assert ready == [*held, rest] and report.transactions == 1
    # and still recognises 700 as released
    resent = change("users", "700:1", 1)
    assert restored.admit([resent], [])[0] == [resent]


def test_save_and_load_by_batch(tmp_path):
    folder = tmp_path / "lakemv-transactions"
    assert TransactionGate.load(folder, 0, COLLECTIONS).to_json() == gate().to_json()  # no folder yet

    g, _ = _half_done_gate()
    TransactionGate.save(folder, 0, gate())
    TransactionGate.save(folder, 1, g)
    assert TransactionGate.load(folder, 2, COLLECTIONS).to_json() == g.to_json()  # the latest earlier batch
    assert TransactionGate.load(folder, 1, COLLECTIONS).to_json() == gate().to_json()  # a replay of batch 1
    assert TransactionGate.load(folder, 0, COLLECTIONS).to_json() == gate().to_json()  # nothing earlier
    assert TransactionGate.load(folder, 9, COLLECTIONS).to_json() == g.to_json()


def test_save_removes_states_older_than_the_one_before(tmp_path):
    folder = tmp_path / "gates"
    for batch in range(5):
        TransactionGate.save(folder, batch, gate())
    assert sorted(p.name for p in folder.iterdir()) == ["3.json", "4.json"]  # no temporary files left
    (folder / "notes.json").write_text("{}")  # not a batch state: left alone, never loaded
    TransactionGate.save(folder, 5, gate())
    assert sorted(p.name for p in folder.iterdir()) == ["4.json", "5.json", "notes.json"]
    assert TransactionGate.load(folder, 6, COLLECTIONS).to_json() == gate().to_json()


def test_crashed_batch_replays_from_the_state_before_it(tmp_path):
    """Batch 1 held a change and saved; it crashed and is replayed: loading for batch 1 again gives
    the state before it, so the replay holds the same change once, not twice."""
    folder = tmp_path / "gates"
    first = change("users", "728:1", 1)
    TransactionGate.save(folder, 0, gate())
    g = TransactionGate.load(folder, 1, COLLECTIONS)
    g.admit([first], [begin("728:0")])
    TransactionGate.save(folder, 1, g)

    replay = TransactionGate.load(folder, 1, COLLECTIONS)
    ready, report = replay.admit([first], [begin("728:0")])
    assert ready == [] and report.held == 1
    TransactionGate.save(folder, 1, replay)

    after = TransactionGate.load(folder, 2, COLLECTIONS)
    second = change("users", "728:1", 2)
    ready, report = after.admit([second], [end("728:9", {"public.users": 2})])
    assert ready == [first, second] and report.transactions == 1


# ---- units: a batch's released changes applied in units that never split a transaction -------------
def test_units_end_only_between_transactions():
    from lakemv.core.cdc.transactions import units

    assert units(10, [3, 6, 10], 4) == [(0, 3), (3, 6), (6, 10)]
    assert units(10, [8, 10], 4) == [(0, 8), (8, 10)]  # a transaction larger than a unit is one unit
    assert units(5, [1, 2, 3, 4, 5], 2) == [(0, 2), (2, 4), (4, 5)]
    assert units(0, [], 5) == [(0, 0)]


def test_admit_reports_a_cut_after_every_whole_transaction_and_every_lone_change():
    from lakemv.core.cdc.transactions import Record, TransactionGate

    def change(txid, order, n):
        block = None if txid is None else {"id": txid, "total_order": order, "data_collection_order": order}
        value = json.dumps({"op": "c", "after": {"id": n}, "source": {"lsn": n}, "transaction": block})
        return Record(f"kafka:/users/t@0:{n}", "users", value)

    gate = TransactionGate({"public.users"})
    records = [change(None, 0, 1), change("5:1", 1, 2), change("5:1", 2, 3), change("6:1", 1, 4)]
    boundaries = [json.dumps({"status": "BEGIN", "id": "5:1"}), json.dumps({"status": "END", "id": "5:9", "event_count": 2,
                  "data_collections": [{"data_collection": "public.users", "event_count": 2}]}),
                  json.dumps({"status": "BEGIN", "id": "6:1"}), json.dumps({"status": "END", "id": "6:1", "event_count": 1,
                  "data_collections": [{"data_collection": "public.users", "event_count": 1}]})]  # fmt: skip
    ready, report = gate.admit(records, boundaries)
    assert [r.origin[-1] for r in ready] == ["1", "2", "3", "4"]
    assert report.cuts == [1, 3, 4]  # never between the two changes of transaction 5


def _event(txid: str, lsn: int, order: int | None, source: dict) -> Record:
    block = {"id": txid, **({"total_order": order} if order is not None else {})}
    value = json.dumps({"op": "c", "after": {"id": lsn}, "source": {"lsn": lsn, **source}, "transaction": block})
    return Record(f"kafka:/orders/t@0:{lsn}", "orders", value)


def _end(txid: str, counts: dict[str, int]) -> str:
    return json.dumps({"status": "END", "id": txid, "event_count": sum(counts.values()),
                       "data_collections": [{"data_collection": k, "event_count": v} for k, v in counts.items()]})  # fmt: skip


def test_changes_without_a_total_order_are_counted_one_by_one():
    g = TransactionGate({"public.orders"})
    first, second = _event("9", 1, None, {"schema": "public", "table": "orders"}), _event("9", 2, None, {"schema": "public", "table": "orders"})
    ready, _ = g.admit([first], [json.dumps({"status": "BEGIN", "id": "9"}), _end("9", {"public.orders": 2})])
    assert ready == []  # one of two
    ready, _ = g.admit([second], [])
    assert ready == [first, second]


def test_an_end_that_names_tables_as_their_source_blocks_do_is_understood():
    """SQL Server names a collection `db.schema.table`; the declared topic gave `schema.table`."""
    g = TransactionGate({"dbo.orders"})
    change = _event("00000025:00000d08:0025", 7, 1, {"db": "shop", "schema": "dbo", "table": "orders"})
    ready, _ = g.admit([change], [json.dumps({"status": "BEGIN", "id": "00000025:00000d08:0025"}),
                                  _end("00000025:00000d08:0025", {"shop.dbo.orders": 1, "shop.dbo.other": 4})])  # fmt: skip
    assert ready == [change]  # not released early (0 expected), not held forever (4 of another table)


def test_draining_hands_back_every_held_change_in_commit_order():
    g = TransactionGate({"public.orders"})
    a, b = _event("1", 1, 1, {"schema": "public", "table": "orders"}), _event("2", 2, 1, {"schema": "public", "table": "orders"})
    ready, report = g.admit([b, a], [json.dumps({"status": "BEGIN", "id": "1"}), json.dumps({"status": "BEGIN", "id": "2"})])
    assert ready == [] and report.held == 2 and report.oldest_seconds is not None
    assert g.drain() == [a, b]
    assert g.held == {} and g.order == []
