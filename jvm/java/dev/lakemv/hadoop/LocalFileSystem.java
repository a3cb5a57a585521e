package dev.lakemv.hadoop;

/** Hadoop's checksummed local file system ({@code file:}) over {@link RawLocalFileSystem}. */
public class LocalFileSystem extends org.apache.hadoop.fs.LocalFileSystem {
  public LocalFileSystem() {
    super(new RawLocalFileSystem());
  }
}
