"""Builds the class-data-sharing archive Spark's JVM starts from (`lakemv.spark.class_archive` says which).

A training run in a process of its own ingests a small generated workload with
`-XX:ArchiveClassesAtExit`; the JVM writes the archive as it exits.

    .venv/bin/python -m lakemv.ops.class_archive [--force]     # what `make setup` runs
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lakemv.catalog.settings import LakeSettings
from lakemv.spark.class_archive import QUIET, archive_path


def _train(out: Path) -> None:
    """In a process of its own: ingest a small workload (snapshot, then updates and deletes, so the
    MERGE, view maintenance and change-feed paths load their classes), and exit: the JVM then writes
    the archive."""
    from lakemv.catalog.declarations import load_sources
    from lakemv.core.runtime import lifecycle
    from lakemv.flows.context import Lake
    from lakemv.spark.session import get_spark, stop_spark
    from lakemv.spark.stream.files import run_ingest
    from lakemv.workload.github import WorkloadConfig, generate_files

    root = Path(tempfile.mkdtemp(prefix="lakemv-cds-"))
    try:
        settings = LakeSettings(
            warehouse=root / "warehouse",
            spark_master="local[2]",
            driver_memory="1g",
            shuffle_partitions=2,
            jvm_class_archive=False,
            jvm_options=f"-XX:ArchiveClassesAtExit={out} {QUIET}",
        )
        sources = load_sources(settings.sources_dirs)
        generate_files(WorkloadConfig(users=40, seed=7, rounds=2), sources, root / "landing")
        spark = get_spark(settings)
        lake = Lake(settings)
        plans = list(lake.checked_plans(spark).values())
        run_ingest(spark, settings, sources, root / "landing", once=True, max_files_per_trigger=5, views=plans)
        jvm = lifecycle.release("spark")  # not killed on stop: writing the archive takes a while
        stop_spark()
        if jvm is not None:
            if jvm.stdin is not None:
                jvm.stdin.close()  # Spark's gateway exits on EOF; the JVM writes the archive as it exits
            jvm.wait(timeout=600)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def build(settings: LakeSettings) -> Path | None:
    """Make the archive for this setup (replacing any); returns its path (None if the JVM made none)."""
    path = archive_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    started = time.monotonic()
    done = subprocess.run(  # noqa: S603 - our interpreter, our module
        [sys.executable, "-m", "lakemv.ops.class_archive", "--train", str(partial)],
        capture_output=True,
        text=True,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("LAKEMV_")} | {"LAKEMV_JARS_DIR": str(settings.jars_dir)},
    )
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        print("class archive: the training run failed; Spark starts without it\n  " + "\n  ".join(tail), file=sys.stderr)
        return None
    partial.replace(path)
    for old in path.parent.glob("lakemv-*.jsa"):
        if old != path:
            old.unlink(missing_ok=True)
    size = path.stat().st_size / (1 << 20)
    print(f"class archive: {path.name}, {size:.0f} MiB, built in {time.monotonic() - started:.0f}s")
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="Build again even if the archive exists.")
    parser.add_argument("--quiet-if-present", action="store_true", help="Print nothing when the archive exists.")
    parser.add_argument("--train", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.train:
        _train(args.train)
        return
    settings = LakeSettings()
    path = archive_path(settings)
    if path.is_file() and not args.force:
        if not args.quiet_if_present:
            print(f"class archive: {path} (up to date)")
        return
    print("class archive: building it (a training run of Spark, about a minute)", flush=True)
    build(settings)


if __name__ == "__main__":
    main()
