"""Hadoop's local file system as lakemv's sessions use it: no `chmod` process per file created
(jvm/java, dev.lakemv.hadoop), the same permission bits as Hadoop's own."""

from __future__ import annotations

import os
import stat


def test_files_are_created_with_hadoops_permissions_through_lakemvs_file_system(spark, tmp_path):
    jvm = spark.sparkContext._jvm
    conf = spark._jsc.hadoopConfiguration()
    path = jvm.org.apache.hadoop.fs.Path(tmp_path.as_uri())
    fs = path.getFileSystem(conf)
    assert fs.getClass().getName() == "dev.lakemv.hadoop.LocalFileSystem"
    assert fs.getRawFileSystem().getClass().getName() == "dev.lakemv.hadoop.RawLocalFileSystem"

    made = jvm.org.apache.hadoop.fs.Path((tmp_path / "a" / "file.bin").as_uri())
    out = fs.create(made, True)
    out.write(bytearray(b"lakemv"))
    out.close()
    mode = stat.S_IMODE(os.stat(tmp_path / "a" / "file.bin").st_mode)
    assert mode == 0o644  # Hadoop's file default (0666) after its umask (fs.permissions.umask-mode, 022)
    assert (tmp_path / "a" / ".file.bin.crc").exists()  # still checksummed

    fs.setPermission(made, jvm.org.apache.hadoop.fs.permission.FsPermission.createImmutable(0o640))
    assert stat.S_IMODE(os.stat(tmp_path / "a" / "file.bin").st_mode) == 0o640

    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(path.toUri(), conf)
    assert context.getDefaultFileSystem().getClass().getName() == "dev.lakemv.hadoop.LocalFs"
