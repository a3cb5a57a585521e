"""Which class archive a Spark session starts from (the archive itself is the JVM's business)."""

from __future__ import annotations

import os
from pathlib import Path

from lakemv.catalog.settings import LakeSettings
from lakemv.spark.class_archive import QUIET, archive_path, java_options


def _settings(tmp_path: Path, **extra) -> LakeSettings:
    jars = tmp_path / "jvm" / "lib"
    jars.mkdir(parents=True, exist_ok=True)
    (jars / "iceberg-spark-runtime-x.jar").write_bytes(b"jar")
    return LakeSettings(warehouse=tmp_path / "wh", jars_dir=jars, **extra)


def test_no_archive_no_option(tmp_path: Path):
    assert java_options(_settings(tmp_path)) == ""


def test_the_archive_for_this_setup_is_used_quietly(tmp_path: Path):
    settings = _settings(tmp_path)
    path = archive_path(settings)
    assert path.parent == tmp_path / "jvm" / "cds"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    assert java_options(settings) == f"-XX:SharedArchiveFile={path} {QUIET}"
    assert java_options(_settings(tmp_path, jvm_class_archive=False)) == ""


def test_changed_jars_name_another_archive(tmp_path: Path):
    settings = _settings(tmp_path)
    before = archive_path(settings)
    (settings.jars_dir / "delta-spark-y.jar").write_bytes(b"another jar")
    assert archive_path(settings) != before
    (settings.jars_dir / "delta-spark-y.jar").write_bytes(b"a bigger jar than before")
    assert archive_path(settings).name.startswith("lakemv-") and archive_path(settings) != before


def test_a_jar_written_again_at_the_same_size_names_another_archive(tmp_path: Path):
    """The JVM refuses an archive when a jar's time changed too (lakemv's own jar compiled again)."""
    settings = _settings(tmp_path)
    before = archive_path(settings)
    jar = settings.jars_dir / "iceberg-spark-runtime-x.jar"
    stat = jar.stat()
    os.utime(jar, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert jar.stat().st_size == stat.st_size and archive_path(settings) != before


def test_driver_options_carry_the_archive_and_the_users_options(tmp_path: Path):
    from lakemv.spark.session import base_conf

    settings = _settings(tmp_path, jvm_options="-Xss4m", executor_jvm_options="-XX:+UseSerialGC")
    archive_path(settings).parent.mkdir(parents=True)
    archive_path(settings).write_bytes(b"archive")
    conf = base_conf(settings)
    driver, executor = conf["spark.driver.extraJavaOptions"], conf["spark.executor.extraJavaOptions"]
    assert driver.startswith("-Dlog4j2.configurationFile=") and driver.endswith(f"-XX:SharedArchiveFile={archive_path(settings)} {QUIET} -Xss4m")
    # the executors have no archive of their own (they start on the workers) and their own options
    assert executor.startswith("-Dlog4j2.configurationFile=") and executor.endswith("-Duser.timezone=UTC -XX:+UseSerialGC"), executor
    # what the driver may collect is bounded by its heap, not Spark's default 1 GiB (a 1M-user state load passes it)
    assert conf["spark.driver.maxResultSize"] == conf["spark.driver.memory"] == settings.driver_memory


def test_jvm_settings_from_the_environment(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("LAKEMV_JVM_OPTIONS", "-Xss4m")
    monkeypatch.setenv("LAKEMV_JVM_CLASS_ARCHIVE", "false")
    settings = LakeSettings(warehouse=tmp_path / "wh")
    assert settings.jvm_options == "-Xss4m" and settings.jvm_class_archive is False
