"""A class-data-sharing archive of the classes a lakemv JVM loads: Spark starts seconds sooner.

Every Spark command pays the JVM's start: loading and verifying the classes of Spark, Iceberg and
Delta (6.9 s for a session, 4.5 s more for its first Iceberg queries on these machines; 4.1 s and
2.4 s from the archive). Java's AppCDS maps them from an archive instead. `make setup` builds the archive once, by a training run
that ingests a small generated workload with `-XX:ArchiveClassesAtExit`; every session after that
starts with `-XX:SharedArchiveFile` (figures in the README, Start-up). This module says which archive a
setup uses; `lakemv.ops.class_archive` builds it.

The JVM validates an archive before it uses it (another JVM build or another class path: it starts
without it, a slower start and nothing else; its note about that is switched off). The archive's
name carries a key of what it was made for (the `java` binary, PySpark's version, the names, sizes
and modification times of the jars Spark loads itself: the JVM refuses an archive when a jar's size
or time differs, e.g. lakemv's own jar compiled again at the same size), so a changed setup looks
for, and `make setup` builds, a new one and removes the old.

"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from lakemv.catalog.settings import LakeSettings

# The JVM's own notes on an archive it cannot use (another JVM, changed jars) go to stdout: off.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _key(settings: LakeSettings) -> str:
    """What an archive is valid for, cheaply: the java binary, PySpark's version and the jars."""
    import pyspark

    java = shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin") if os.environ.get("JAVA_HOME") else None)
    parts = [pyspark.__version__, "jars on the driver's class path"]  # how lakemv.spark.session loads them
    if java:
        real = Path(java).resolve()
        parts.append(f"{real}:{real.stat().st_size}:{real.stat().st_mtime_ns}")
    for jar in sorted(settings.jars_dir.glob("*.jar")):
        parts.append(f"{jar.name}:{jar.stat().st_size}:{jar.stat().st_mtime_ns}")  # the JVM checks both
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def archive_path(settings: LakeSettings) -> Path:
    return settings.jars_dir.parent / "cds" / f"lakemv-{_key(settings)}.jsa"


def java_options(settings: LakeSettings) -> str:
    """Driver JVM options that use the archive, or "" when there is none for this setup."""
    if not settings.jvm_class_archive or not settings.jars_dir.is_dir():
        return ""
    path = archive_path(settings)
    return f"-XX:SharedArchiveFile={path} {QUIET}" if path.is_file() else ""
