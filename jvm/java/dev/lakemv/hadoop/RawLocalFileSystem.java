package dev.lakemv.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.io.nativeio.NativeIO;

/**
 * Hadoop's local file system, setting a file's permissions through java.nio instead of a process.
 *
 * <p>Without Hadoop's native library (PyPI's PySpark ships none), {@code RawLocalFileSystem} runs
 * {@code chmod} in a new process for every file and directory it creates: a fork of the whole JVM.
 * An Iceberg commit creates three files (a manifest, a manifest list, the table metadata), each with
 * its checksum file: six processes, about 60 of a commit's 70 ms on these machines. This sets the
 * same permission bits with {@link Files#setPosixFilePermissions}; with the native library loaded it
 * is Hadoop's own.
 */
public class RawLocalFileSystem extends org.apache.hadoop.fs.RawLocalFileSystem {
  private static final PosixFilePermission[] BITS = {
    PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_READ,
    PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
    PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_READ,
  };

  /** The permission bits rwxrwxrwx of {@code mode} as java.nio's set (sticky and set-id bits aside). */
  static Set<PosixFilePermission> posix(short mode) {
    Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
    for (int bit = 0; bit < BITS.length; bit++) {
      if ((mode & (1 << bit)) != 0) {
        set.add(BITS[bit]);
      }
    }
    return set;
  }

  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    if (NativeIO.isAvailable()) {
      super.setPermission(p, permission);
      return;
    }
    Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(permission.toShort()));
  }
}
