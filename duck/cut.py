"""A consistent read of the lake: every table as the last committed batch left it (`lakemv query --consistent`).

A batch commits its tables one after the other - mirrors, then the views level by level, then its
ledger row - so a reader between two of those commits sees some tables a batch ahead of others (a view
ahead of the views that read it). The ledger's row is the batch's last commit: every table as of that
moment shows the same batches, the whole DAG of views included. Each table's snapshot as of then is
read from its metadata file (its main branch's snapshot log), so the read stays DuckDB's.
"""

from __future__ import annotations

import json

from lakemv.catalog.lake import table_locations
from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.storage import arrow_file
from lakemv.catalog.tables import LEDGER, OPS_NAMESPACE

NOT_YET = -1  # a table with no snapshot yet at the cut: read as empty


def _metadata(settings: LakeSettings, location: str) -> dict:
    fs, path = arrow_file(location, settings.s3 if settings.remote else None)
    with fs.open_input_stream(path, compression="gzip" if location.endswith(".gz.metadata.json") else None) as stream:
        return json.loads(stream.read())


def cut_time(settings: LakeSettings) -> int | None:
    """When the last batch committed (its ledger row, epoch millis); None before the first."""
    location = table_locations(settings, OPS_NAMESPACE, LEDGER).get(LEDGER)
    if location is None:
        return None
    metadata = _metadata(settings, location)
    current = metadata.get("current-snapshot-id")
    return next((s["timestamp-ms"] for s in metadata.get("snapshots", []) if s["snapshot-id"] == current), None)


def snapshot_at(settings: LakeSettings, location: str, millis: int) -> int:
    """The snapshot of the table's main branch as of `millis` (`NOT_YET`: it had none then)."""
    log = _metadata(settings, location).get("snapshot-log", [])
    found = [entry["snapshot-id"] for entry in log if entry["timestamp-ms"] <= millis]
    return found[-1] if found else NOT_YET
