"""Scale-out by settings alone: a Spark standalone cluster, an S3-compatible object store and a REST
Iceberg catalog, all real processes on loopback (`lakemv cluster up`), and lakemv pointed at them by
the LAKEMV_* settings `lakemv cluster env` prints, as the manual's "Scaling out" recipe (docs/scaling-out.md) does.

The lake built there must equal the one a local run builds from the same input, read by another
engine (DuckDB, through the REST catalog and the object store); every file lakemv keeps must be in
the object store, the local indexed state on the driver's disk only, and a driver killed mid-batch that lost its disk
must carry on correctly.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from lakemv.catalog.lake import delta_rs_options, pyiceberg_catalog
from lakemv.catalog.storage import s3_filesystem
from lakemv.core.batch.journal import BatchRef
from lakemv.ops.cluster import Cluster, ClusterConfig
from tests.e2e.cli import lakemv, move_round
from tests.e2e.crash_harness import VIEWS, Place, assert_same_lake, ingest, read_lake
from tests.e2e.secrets import CommandLines, holding, prefect_holding

pytestmark = pytest.mark.slow(300)


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """A fresh scale-out stack, started as the manual's recipe starts it: `lakemv cluster up` (s3proxy,
    the REST catalog, a Spark master and one worker), `lakemv cluster down --purge` at the end."""
    folder = tmp_path_factory.mktemp("cluster")
    try:
        lakemv("cluster", "up", "--dir", str(folder), "--workers", "1", "--worker-cores", "1", "--worker-memory", "2g")
        lakemv("cluster", "status", "--dir", str(folder))
        yield Cluster(ClusterConfig.load(folder))
    finally:
        lakemv("cluster", "down", "--dir", str(folder), "--purge", check=False)
        assert not folder.exists()


@pytest.fixture
def object_store(tmp_path_factory: pytest.TempPathFactory):
    """s3proxy and the REST catalog alone (no Spark)."""
    stack = Cluster(ClusterConfig(tmp_path_factory.mktemp("store")))
    try:
        stack.up(spark=False)
        yield stack
    finally:
        stack.down(purge=True)


@pytest.mark.slow(20)
def test_lakemvs_own_files_in_the_object_store(object_store: Cluster):
    """The journal and the other files lakemv keeps beside its checkpoints, on a real S3 server:
    whole-file writes, listing, missing files, removal; a journal entry counts only with its manifest."""
    import pyarrow as pa

    from lakemv.catalog.storage import location
    from lakemv.core.batch.journal import Journal, TablePlan

    root = location(f"{object_store.config.warehouse}/_probe", object_store.config.s3)
    assert not root.exists() and root.children() == []
    (root / "a" / "one.json").write_text('{"n": 1}')
    (root / "a" / "two.json").write_bytes(b"2")
    assert root.children() == ["a"] and (root / "a").children() == ["one.json", "two.json"] and (root / "a").is_dir()
    assert (root / "a" / "one.json").read_text() == '{"n": 1}'
    with pytest.raises(FileNotFoundError):
        (root / "missing").read_bytes()
    (root / "a" / "one.json").remove()
    assert (root / "a").children() == ["two.json"]

    journal = Journal(root / "journal")
    ref, later = BatchRef("s", 3, 0), BatchRef("s", 4, 0)
    journal.save(ref, {"users": TablePlan(pa.table({"id": [1, 2]}), pa.table({"id": [1]}))}, {"page_views": 7})
    loaded = journal.load(ref)
    assert loaded["users"].rows.num_rows == 2 and loaded["users"].images.num_rows == 1
    assert journal.watermarks(ref) == {"page_views": 7} and journal.pending_watermarks() == {"page_views": 7}
    (root / "journal" / later.entry_name / "users.rows.arrow").write_bytes(b"half")  # a save cut short
    assert journal.load(later) is None and journal.write_ids() == {"s:3.0"}
    journal.forget_before(later)
    assert journal.load(ref) is None and journal.write_ids() == set()
    root.remove()
    assert root.children() == [] and not (root / "a" / "two.json").exists()


def _env(cluster: Cluster, driver: Path, **extra: str) -> dict[str, str]:
    """What `eval "$(lakemv cluster env)"` exports, plus the driver's own folder."""
    printed = lakemv("cluster", "env", "--dir", str(cluster.folder)).stdout
    exported = dict(line.removeprefix("export ").split("=", 1) for line in printed.splitlines() if line.startswith("export "))
    assert exported == cluster.config.settings_env() and exported["LAKEMV_SPARK_MASTER"].startswith("spark://"), printed
    return {**exported, "LAKEMV_LOCAL_DIR": str(driver), **extra}


def _objects(cluster: Cluster, under: str) -> list[str]:
    c = cluster.config
    infos = s3_filesystem(c.s3).get_file_info(pafs.FileSelector(f"{c.bucket}/{under}", recursive=True, allow_not_found=True))
    return sorted(i.path[len(c.bucket) + 1 :] for i in infos if i.type == pafs.FileType.File)


def _master(cluster: Cluster) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster.config.master_ui_port}/json/", timeout=5) as response:  # noqa: S310
        return json.loads(response.read())


def _said(done) -> str:  # noqa: ANN001 - a CompletedProcess
    """The command's output with rich's line wrapping undone."""
    return " ".join(done.stdout.split())


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_ingest_views_and_flows_run_on_the_cluster_through_the_object_store_and_rest_catalog(
    cluster: Cluster, tmp_path: Path, sources, monkeypatch: pytest.MonkeyPatch
):
    staging, landing, driver = tmp_path / "staging", tmp_path / "landing", tmp_path / "driver"
    lakemv("generate", "--out", str(staging), "--users", "150", "--rounds", "3", "--seed", "7")
    reference, ref_staging, ref_landing = tmp_path / "reference-wh", tmp_path / "reference-staging", tmp_path / "reference-landing"
    shutil.copytree(staging, ref_staging)

    def reference_round(*numbers: int) -> None:
        """The same files, in the same batches, into a local warehouse on local[2]."""
        for number in numbers:
            move_round(ref_staging, ref_landing, number)
        lakemv("--warehouse", str(reference), "ingest", "--landing", str(ref_landing), "--once")

    env = _env(cluster, driver, LAKEMV_SINKS=json.dumps({"user_profile": ["delta"]}))
    monkeypatch.chdir(tmp_path)  # a stray local ./warehouse would show here
    for number in (0, 1):
        move_round(staging, landing, number)

    # The first run's driver is SIGKILLed mid-batch (its journal in the object store, the view committed,
    # its local state not yet); it restarts on a blank disk, with the next round landed meanwhile: the
    # batch replays from the journal in the object store, the state is rebuilt from the tables, and the
    # next round is a batch of its own, as in the local run (compared below). The harness's `--cluster`
    # kills at every step there.
    signal_file = tmp_path / "crash-signal"
    arm = {"LAKEMV_CRASH_AT": "view:user_profile", "LAKEMV_CRASH_SIGNAL": str(signal_file)}
    with CommandLines() as commands:
        crashed = ingest(cluster.config.warehouse, landing, {**os.environ, **env, **arm}, signal_file, log=tmp_path / "crashed-ingest.log")
        assert crashed is not None and crashed.startswith("view:user_profile@"), crashed
        entry = "/lakemv-journal/" + BatchRef("ingest", int(crashed.rsplit("@", 1)[1])).batch_prefix  # the crashed batch's entries
        assert any(entry in o and o.endswith("manifest.json") for o in _objects(cluster, "warehouse/_checkpoints")), entry
        shutil.rmtree(driver)
        move_round(staging, landing, 2)
        ingested = lakemv("ingest", "--landing", str(landing), "--once", env=env)
    reference_round(0, 1)
    reference_round(2)

    # The object store's secret reached the driver and the executors, but never a command line, the
    # output, a log or a file lakemv wrote (the stack's own 0600 settings file and s3proxy's hold it).
    secret = cluster.config.secret_key
    assert any("org.apache.spark.executor.CoarseGrainedExecutorBackend" in c for c in commands.seen), "no executor was sampled"
    assert not [c for c in commands.seen if secret in c], "the S3 secret is on a command line"
    assert secret not in ingested.stdout + ingested.stderr
    assert not holding(cluster.folder, secret, skip=(cluster.folder / "cluster.json", cluster.folder / "s3proxy.properties")), "a log holds the S3 secret"
    assert not holding(tmp_path, secret), "a file lakemv wrote holds the S3 secret"
    assert not prefect_holding(secret), "the Prefect API holds the S3 secret (an artifact or a flow run's parameters)"

    # the Spark application ran on the cluster (with a cluster master no task runs in the driver): the
    # master lists it with its cores, and the worker launched its executor with the jars the driver shipped
    apps = [a for a in _master(cluster)["completedapps"] if a["name"] == "lakemv"]
    assert apps and all(a["cores"] >= 1 for a in apps), _master(cluster)
    work = cluster.folder / "worker-0" / "work"
    executors = [d for app in work.glob("app-*") for d in app.iterdir() if d.is_dir()]
    assert executors, f"no executor ran on the worker ({work})"
    assert all("CoarseGrainedExecutorBackend" in (d / "stderr").read_text(errors="replace") for d in executors)
    assert all(any(d.glob("iceberg-spark-runtime-*.jar")) and any(d.glob("hadoop-aws-*.jar")) for d in executors)

    # every file lakemv keeps is in the object store; the driver's disk holds its local state and caches
    objects = _objects(cluster, "warehouse")
    for expected in ("warehouse/mirror/users/data/", "warehouse/views/user_profile/metadata/", "warehouse/delta/user_profile/_delta_log/"):
        assert any(o.startswith(expected) for o in objects), f"nothing under {expected}: {objects[:20]}"
    assert any("/data/lmv-data-" in o for o in objects), "direct commits write their Parquet files to the object store"
    checkpoint = [o for o in objects if o.startswith("warehouse/_checkpoints/ingest-")]
    assert any("/commits/" in o for o in checkpoint) and any("/lakemv-journal/" in o and o.endswith("manifest.json") for o in checkpoint)
    local = _files(driver)
    assert local and all(f.startswith(("state/", "_lakemv/")) for f in local), local
    assert any(f.endswith("state.sqlite") for f in local), "the local state lives on the driver's disk, rebuilt there"
    assert not any("state.sqlite" in o for o in objects), "the local state is not in the object store"
    assert not (tmp_path / "warehouse").exists() and not (tmp_path / ".lakemv").exists()

    # the same lake as a local run of the same input, read by DuckDB through the REST catalog
    place = Place(cluster.config.warehouse, env, driver)
    clustered = read_lake(place.settings, sources)
    assert_same_lake(read_lake(reference, sources), clustered, "cluster vs local")

    # the flows on the cluster: backfill (a branch, published), compaction, verify (DuckDB)
    lakemv("backfill", "user_profile", env=env)
    compacted = _said(lakemv("compact", "mirror.stars", "views.user_profile", env=env))
    assert "compacted 2 tables" in compacted, compacted
    verified = _said(lakemv("verify", env=env))  # every view
    assert all(f"{view} matches its recompute (DuckDB)" in verified for view in VIEWS), verified
    assert verified.count("0 mismatching, 0 missing, 0 extra") == len(VIEWS), verified
    assert_same_lake(read_lake(reference, sources), read_lake(place.settings, sources), "cluster vs local, after the flows")

    # pyiceberg and delta-rs reach the same tables by the same settings
    settings = place.settings
    rows = pyiceberg_catalog(settings).load_table(("views", "user_profile")).scan().to_arrow().num_rows
    assert rows == len(clustered["views.user_profile"])
    from deltalake import DeltaTable

    product = DeltaTable((settings.delta_root / "user_profile").hadoop, storage_options=delta_rs_options(settings))
    assert product.to_pyarrow_table().num_rows == rows
    out = lakemv("query", "select count(*) AS n from user_profile", "--format", "json", env=env).stdout
    assert json.loads(out.splitlines()[0])["n"] == rows

