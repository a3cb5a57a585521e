"""A class-data-sharing archive of the classes a lakemv JVM loads: Spark starts seconds sooner.

Every Spark command pays the JVM's start: loading and verifying the classes of Spark, Iceberg and
Delta (6.9 s for a session, 4.5 s more for its first Iceberg queries on these machines; 4.1 s and
2.4 s from the archive). Java's AppCDS maps them from an archive instead. `make setup` builds the archive once, by a training run
that ingests a small generated workload with `-XX:ArchiveClassesAtExit`; every session after that
starts with `-XX:SharedArchiveFile` (figures in the README, Start-up).

The JVM validates an archive before it uses it (another JVM build or another class path: it starts
without it, a slower start and nothing else; its note about that is switched off). The archive's
name carries a key of what it was made for (the `java` binary, PySpark's version, the names and sizes
of the jars Spark loads itself), so a changed setup looks for, and `make setup` builds, a new one
and removes the old.

    .venv/bin/python -m spark.class_archive [--force]     # what `make setup` runs
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from catalog.settings import LakeSettings

# The JVM's own notes on an archive it cannot use (another JVM, changed jars) go to stdout: off.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _key(settings: LakeSettings) -> str:
    """What an archive is valid for, cheaply: the java binary, PySpark's version and the jars."""
    import pyspark

    java = shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin") if os.environ.get("JAVA_HOME") else None)
    parts = [pyspark.__version__, "jars on the driver's class path"]  # how spark.session loads them
    if java:
        real = Path(java).resolve()
        parts.append(f"{real}:{real.stat().st_size}:{real.stat().st_mtime_ns}")
    for jar in sorted(settings.jars_dir.glob("*.jar")):
        parts.append(f"{jar.name}:{jar.stat().st_size}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def archive_path(settings: LakeSettings) -> Path:
    return settings.jars_dir.parent / "cds" / f"lakemv-{_key(settings)}.jsa"


def java_options(settings: LakeSettings) -> str:
    """Driver JVM options that use the archive, or "" when there is none for this setup."""
    if not settings.jvm_class_archive or not settings.jars_dir.is_dir():
        return ""
    path = archive_path(settings)
    return f"-XX:SharedArchiveFile={path} {QUIET}" if path.is_file() else ""


def _train(out: Path) -> None:
    """In a process of its own: ingest a small workload (snapshot, then updates and deletes, so the
    MERGE, view maintenance and change-feed paths load their classes), and exit: the JVM then writes
    the archive."""
    from catalog.declarations import load_sources
    from flows.lake import Lake
    from spark import lifecycle
    from spark.ingest import run_ingest
    from spark.session import get_spark, stop_spark
    from workload.github import WorkloadConfig, generate_files

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
        [sys.executable, "-m", "spark.class_archive", "--train", str(partial)],
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
