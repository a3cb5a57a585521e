"""Whole source transactions only: which Kafka records a batch may apply. Pure.

With `provide.transaction.metadata=true` Debezium tags every change with `transaction.id` and
writes a BEGIN and an END event per transaction to `<prefix>.transaction`, the END with how many
changes each table ("data collection") got. Changes of one transaction arrive on several topics and
may be read in different batches. `TransactionGate` holds a transaction's changes back until all of
them and its END have been read, and releases transactions in commit order (the order of the
transaction topic), so every mirror and view shows a prefix of the source's commits: a primary-key
change (delete + create) or an order written to two tables is never visible half applied.

Changes without a transaction block (snapshot reads, sources without the metadata) pass at once.
A transaction read again after it was released (Kafka Connect restarted and re-sent it) passes at
once too: applying a change twice changes nothing (positions). The gate's state is saved per batch
(`save`/`load`), so what a crashed batch held is neither lost nor applied twice.
"""

from __future__ import annotations

import json
import re
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakemv.catalog.storage import Location, as_location

RELEASED_KEPT = 100_000  # ids of released transactions remembered, to recognise re-sent ones
# Debezium's PostgreSQL connector names a transaction `<txId>:<LSN>`, and the LSN part differs
# between its BEGIN, its END and its changes (measured: BEGIN 728:26445688, END 728:26658336, a
# change 728:26498824): the transaction is the txId. Other connectors' ids (MySQL GTIDs, SQL Server
# LSNs) do not have this form and are taken whole.
_POSTGRES_ID = re.compile(r"^(\d+):\d+$")


def transaction_key(txid: Any) -> str:
    """The identity of a source transaction from Debezium's transaction id."""
    text = str(txid)
    found = _POSTGRES_ID.match(text)
    return found.group(1) if found else text


@dataclass(frozen=True, slots=True)
class Record:
    """One Kafka record of a data topic: where it came from, its table, its value (None: tombstone)."""

    origin: str
    table: str
    value: str | None


@dataclass
class _Held:
    records: list[Record] = field(default_factory=list)
    orders: set[int | str] = field(default_factory=set)  # distinct changes seen: total_order, else the record's origin
    counts: list[tuple[str, int]] | None = None  # the END's changes per data collection; None: no END yet
    began: bool = False
    since: float = field(default_factory=time.time)  # when the first of its changes was held (for status)


def _payload(value: str | None) -> dict[str, Any] | None:
    if value is None:
        return None
    try:
        event = json.loads(value)
    except (json.JSONDecodeError, RecursionError):
        return None
    if isinstance(event, dict) and "payload" in event and "schema" in event:
        event = event["payload"]
    return event if isinstance(event, dict) else None


def transaction_of(value: str | None) -> tuple[str, int | None, tuple[str, ...]] | None:
    """(transaction id, total order or None, the names its table may have in an END's counts) of a
    change; None when it carries no transaction block."""
    event = _payload(value)
    block = event.get("transaction") if event is not None else None
    if not isinstance(block, dict) or block.get("id") is None:
        return None
    try:
        order: int | None = int(block.get("total_order"))
    except (TypeError, ValueError):
        order = None
    source = event.get("source") if isinstance(event.get("source"), dict) else {}
    parts = [source.get(k) for k in ("db", "schema", "table")]
    db, schema, table = (str(p) if p is not None else None for p in parts)
    names = tuple(".".join(n) for n in ((schema, table), (db, schema, table), (db, table)) if all(n))  # type: ignore[arg-type]
    return transaction_key(block["id"]), order, names


@dataclass
class GateReport:
    """What one `admit` did: changes released and held, transactions completed and waiting."""

    released: int = 0
    held: int = 0
    oldest_seconds: float | None = field(default=None, compare=False)  # how long the oldest held change has waited
    cuts: list[int] = field(default_factory=list, compare=False)  # places in the released records between whole transactions
    transactions: int = 0
    waiting: int = 0
    oldest_waiting: str | None = None


class TransactionGate:
    """Holds changes back until their transaction is complete (see the module docstring).

    `collections` are the data collections (`<schema>.<table>`) lakemv reads: an END's counts for
    other tables are not waited for.
    """

    def __init__(self, collections: Iterable[str]):
        self.collections = frozenset(collections)
        self.held: dict[str, _Held] = {}
        self.order: list[str] = []  # transactions by BEGIN, in commit order, not yet released
        self.released: OrderedDict[str, None] = OrderedDict()
        self.seen_metadata = False
        self.observed: set[str] = set()  # names of our tables as changes' source blocks spell them

    def _hold(self, txid: str) -> _Held:
        held = self.held.get(txid)
        if held is None:
            held = self.held[txid] = _Held()
        return held

    def admit(self, records: Sequence[Record], boundaries: Sequence[str | None]) -> tuple[list[Record], GateReport]:
        """Records of data topics and values of the transaction topic read in one batch -> the
        records to apply now, in order: those outside transactions, then whole transactions."""
        report = GateReport()
        ready: list[Record] = []
        for value in boundaries:
            event = _payload(value)
            if event is None or event.get("id") is None or event.get("status") not in ("BEGIN", "END"):
                continue
            self.seen_metadata = True
            txid = transaction_key(event["id"])
            if txid in self.released:
                continue  # re-sent by a restarted connector
            held = self._hold(txid)
            if event["status"] == "BEGIN":
                if not held.began:
                    held.began = True
                    self.order.append(txid)
            else:
                held.counts = [
                    (str(c.get("data_collection")), int(c.get("event_count") or 0)) for c in event.get("data_collections") or [] if isinstance(c, dict)
                ]
                if not held.began:  # an END whose BEGIN was lost: it still orders the transaction
                    held.began = True
                    self.order.append(txid)
        for record in records:
            tagged = transaction_of(record.value)
            if tagged is None:
                ready.append(record)
                report.cuts.append(len(ready))
                continue
            self.seen_metadata = True
            txid, total_order, names = tagged
            self.observed.update(names)
            if txid in self.released:
                ready.append(record)  # a re-sent change: applying it again changes nothing
                report.cuts.append(len(ready))
                continue
            held = self._hold(txid)
            held.records.append(record)
            held.orders.add(total_order if total_order is not None else record.origin)
        while self.order:
            txid = self.order[0]
            held = self.held[txid]
            if held.counts is None:
                break
            ours = self.collections | self.observed  # an END may name a table as its source block does
            expected = sum(n for name, n in held.counts if name in ours)
            if len(held.orders) < expected:
                break
            self.order.pop(0)
            del self.held[txid]
            ready.extend(held.records)
            report.cuts.append(len(ready))
            report.transactions += 1
            self.released[txid] = None
            if len(self.released) > RELEASED_KEPT:
                self.released.popitem(last=False)
        report.released = len(ready)
        report.held = sum(len(h.records) for h in self.held.values())
        report.waiting = len(self.held)
        report.oldest_waiting = self.order[0] if self.order else next(iter(self.held), None)
        if self.held:
            report.oldest_seconds = round(time.time() - min(h.since for h in self.held.values()), 1)
        return ready, report

    def drain(self) -> list[Record]:
        """Every held change, transactions in commit order first (for a stream switched to
        `kafka_transactions=off`: what it held must still be applied, not dropped)."""
        ordered = [t for t in self.order if t in self.held] + [t for t in self.held if t not in self.order]
        records = [r for t in ordered for r in self.held[t].records]
        self.held.clear()
        self.order.clear()
        return records

    # ---- persistence ----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "collections": sorted(self.collections),
            "order": self.order,
            "seen_metadata": self.seen_metadata,
            "released": list(self.released),
            "observed": sorted(self.observed),
            "held": {
                txid: {
                    "records": [[r.origin, r.table, r.value] for r in h.records],
                    "orders": sorted(h.orders, key=str),
                    "counts": h.counts,
                    "began": h.began,
                    "since": h.since,
                }
                for txid, h in self.held.items()
            },
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], collections: Iterable[str]) -> TransactionGate:
        gate = cls(collections)
        gate.order = list(data.get("order", []))
        gate.seen_metadata = bool(data.get("seen_metadata"))
        gate.released = OrderedDict((t, None) for t in data.get("released", []))
        gate.observed = set(data.get("observed", []))
        for txid, h in data.get("held", {}).items():
            counts = [tuple(c) for c in h["counts"]] if h.get("counts") is not None else None
            gate.held[txid] = _Held([Record(*r) for r in h["records"]], set(h["orders"]), counts, h["began"], h.get("since", time.time()))
        return gate

    @staticmethod
    def save(folder: Location | Path, batch_id: int, gate: TransactionGate) -> None:
        """The gate after batch `batch_id`, written atomically; states older than the one before are removed."""
        folder = as_location(folder)
        (folder / f"{batch_id}.json").write_text(json.dumps(gate.to_json(), separators=(",", ":")))
        for batch in _saved(folder):
            if batch < batch_id - 1:
                (folder / f"{batch}.json").remove()

    @classmethod
    def load(cls, folder: Location | Path, batch_id: int, collections: Iterable[str]) -> TransactionGate:
        """The gate as batch `batch_id` found it: the state saved by the latest earlier batch."""
        folder = as_location(folder)
        earlier = [batch for batch in _saved(folder) if batch < batch_id]
        if not earlier:
            return cls(collections)
        data = json.loads((folder / f"{max(earlier)}.json").read_text())
        return cls.from_json(data, collections)


def _saved(folder: Location) -> list[int]:
    """Batch ids of the gate states in `folder`."""
    stems = (name[: -len(".json")] for name in folder.children() if name.endswith(".json"))
    return [int(stem) for stem in stems if stem.isdigit()]


def units(count: int, cuts: Sequence[int], size: int) -> list[tuple[int, int]]:
    """[start, end) ranges of at most `size` records that end only at `cuts` (between transactions),
    so no unit applies part of a transaction; a transaction larger than `size` is a unit of its own."""
    points = sorted({c for c in cuts if 0 < c <= count} | {count})
    ranges, start, end = [], 0, 0
    for point in points:
        if point - start > size and end > start:
            ranges.append((start, end))
            start = end
        end = point
    if end > start or not ranges:
        ranges.append((start, end))
    return ranges
