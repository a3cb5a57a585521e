"""How a micro-batch becomes units of work, and the one loop that applies them, for every source.

A source adapter (`lakemv.spark.stream`) reads a micro-batch and cuts it into `Unit`s with
`file_units` (landing files: bounded chunks of lines) or a `KafkaCutter` (Debezium's topics: whole
source transactions only, in commit order, held back across batches by the `TransactionGate`). The
`UnitLoop` hands each unit to the processor as `BatchRef(stream, batch, chunk)` and runs what follows
each one (results, data products). Nothing here needs a JVM.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lakemv.catalog.storage import Location
from lakemv.core.batch.journal import BatchRef
from lakemv.core.batch.result import BatchResult
from lakemv.core.cdc.changeset import decode_lines
from lakemv.core.cdc.transactions import GateReport, Record, TransactionGate, units


@dataclass(frozen=True)
class Unit:
    """One unit of work: `(text, origin)` pairs (text None for a line that is not UTF-8: a dead letter),
    or the engine's handle on lines it parses set-wise; `skips`: files that gave no line, by reason."""

    lines: Any
    skips: Mapping[str, int] | None = None


def file_units(values: Sequence[bytes | None], files: Sequence[str], size: int, skips: Mapping[str, int] | None) -> list[Unit]:
    """Landing lines (raw bytes, with the file each came from) in units of at most `size`. A batch of
    no lines is one empty unit all the same, so its `skips` (on the first unit) are recorded."""
    text = decode_lines(list(values))
    starts = range(0, max(len(text), 1), size)
    return [Unit(list(zip(text[s : s + size], files[s : s + size], strict=True)), skips if i == 0 else None) for i, s in enumerate(starts)]


class KafkaCutter:
    """Cuts a batch of Kafka records into units that end only between source transactions.

    With a transaction topic, its BEGIN/END records feed the gate, which holds each transaction's
    changes until all of them are read, and releases transactions in commit order; what it holds is
    saved per batch in `gates` before any unit runs, so a replay cuts the same units. Event streams have
    no source transactions: their records pass the gate, after the changes it releases. Without a
    transaction topic (switched off), whatever an earlier run held is applied first.
    """

    def __init__(
        self, tables: Mapping[str, str], collections: Iterable[str], transaction_topic: str | None, events: Collection[str],
        gates: Location, size: int, on_gate: Callable[[GateReport], None] | None = None,
    ):  # fmt: skip
        self.tables = tables  # topic -> source table
        self.collections = set(collections)  # `<schema>.<table>` as Debezium names the sources
        self.transaction_topic = transaction_topic
        self.events = set(events)
        self.gates = gates
        self.size = size
        self.on_gate = on_gate

    def units(self, rows: pa.Table, batch_id: int) -> list[Unit]:
        """`rows` (topic, partition, offset, value as bytes) of batch `batch_id`, as units in order."""
        rows = rows.sort_by([("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")])
        topic, partition, offset = (rows.column(c).to_pylist() for c in ("topic", "partition", "offset"))
        value = decode_lines(rows.column("value").to_pylist())  # a record that is not UTF-8 is a dead letter
        records, boundaries = [], []
        for i in range(rows.num_rows):
            if self.transaction_topic is not None and topic[i] == self.transaction_topic:
                boundaries.append(value[i])
                continue
            name = self.tables.get(topic[i], topic[i].rsplit(".", 1)[-1])  # a topic no longer declared: a dead letter
            records.append(Record(f"kafka:/{name}/{topic[i]}@{partition[i]}:{offset[i]}", name, value[i]))
        cuts = list(range(1, len(records) + 1))  # without transactions: any record ends a unit
        if self.transaction_topic is None and self.gates.is_dir():  # switched off: what was held is applied first
            gate = TransactionGate.load(self.gates, batch_id, self.collections)
            held = gate.drain()
            if held:
                records = held + records
                cuts = list(range(1, len(records) + 1))
            TransactionGate.save(self.gates, batch_id, gate)
        if self.transaction_topic is not None:
            events = [r for r in records if r.table in self.events]
            records = [r for r in records if r.table not in self.events]
            gate = TransactionGate.load(self.gates, batch_id, self.collections)
            records, report = gate.admit(records, boundaries)
            cuts = [*report.cuts, *range(len(records) + 1, len(records) + len(events) + 1)]
            records = records + events
            TransactionGate.save(self.gates, batch_id, gate)  # before any unit: a replay recomputes the same
            self._record_mode(gate, report)
            if self.on_gate is not None:
                self.on_gate(report)
        if not records:  # nothing, or every change held for its transaction
            return []
        return [Unit([(r.value, r.origin) for r in records[start:end]]) for start, end in units(len(records), cuts, self.size)]

    def _record_mode(self, gate: TransactionGate, report: GateReport) -> None:
        """What `lakemv status` shows of the stream's transactions (`mode.json` beside the gates)."""
        mode = {
            "mode": "whole transactions" if gate.seen_metadata else "per change (no transaction metadata seen yet)",
            "held_changes": report.held,
            "waiting_transactions": report.waiting,
            "oldest_waiting": report.oldest_waiting,
            "oldest_waiting_seconds": report.oldest_seconds,
        }
        (self.gates / "mode.json").write_text(json.dumps(mode))


class UnitLoop:
    """Applies each micro-batch's units in order, as `BatchRef(stream, batch, chunk)`; `after` runs after
    each (the stream's results, its data products). `process(ref, lines, skips, last=..., more=...)` is the
    processor's; the stream's id is read once, when the first batch comes."""

    def __init__(self, process: Callable[..., BatchResult], stream_id: Callable[[], str], after: Callable[[BatchResult], None]):
        self.process = process
        self._stream_id = stream_id
        self._stream: str | None = None
        self.after = after

    def run(self, batch_id: int, batch: Sequence[Unit], more: bool = False) -> None:
        """The units of micro-batch `batch_id`; `more`: more of a backlog follows it (its views can wait)."""
        if self._stream is None:
            self._stream = self._stream_id()
        for chunk, unit in enumerate(batch):
            ref = BatchRef(self._stream, batch_id, chunk)
            self.after(self.process(ref, unit.lines, unit.skips, last=chunk == len(batch) - 1, more=more))
