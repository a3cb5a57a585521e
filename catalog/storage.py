"""Where the lake's files live: a local folder or an S3 bucket (any S3-compatible store), one API.

The warehouse setting names either (`./warehouse`, `s3://lake/warehouse`). Each engine reaches S3
its own way, configured from the same settings: Iceberg through its S3FileIO (`s3://`), Spark's
streaming checkpoints and Delta products through Hadoop's s3a file system (`s3a://`), lakemv's own
durable files (the batch journal, the transaction gates) through pyarrow's S3 file system, DuckDB
through its httpfs extension.

A `Location` is one file or folder. Its writes are atomic: a reader sees a file whole or not at all
(on a local disk by writing a temporary file and renaming it, fsynced; on S3 a PUT is atomic by
itself). There is no rename on S3, so a group of files is made durable by writing a marker file
last (the journal's manifest).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote, urlparse

from lakemv.core.errors import ConfigError
from lakemv.core.runtime.files import replace_file

S3_SCHEMES = ("s3", "s3a", "s3n")


def is_remote(uri: str) -> bool:
    """Whether a location names an object store rather than a local path."""
    return urlparse(uri).scheme in S3_SCHEMES


def split_s3(uri: str) -> tuple[str, str]:
    """(bucket, key) of an s3:// (or s3a://) URI."""
    parsed = urlparse(uri)
    if parsed.scheme not in S3_SCHEMES or not parsed.netloc:
        raise ConfigError(f"not an S3 location: {uri!r} (expected s3://bucket/prefix)")
    return parsed.netloc, parsed.path.strip("/")


@dataclass(frozen=True)
class S3Options:
    """How to reach an S3-compatible store (all engines get the same)."""

    endpoint: str | None = None  # e.g. http://127.0.0.1:9000; None: AWS itself
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    region: str = "us-east-1"
    path_style: bool = True

    @property
    def secure(self) -> bool:
        return self.endpoint is None or self.endpoint.startswith("https")

    @property
    def host(self) -> str | None:
        """The endpoint without its scheme (what DuckDB's secret takes)."""
        if self.endpoint is None:
            return None
        parsed = urlparse(self.endpoint)
        return parsed.netloc or parsed.path


@lru_cache(maxsize=8)
def s3_filesystem(options: S3Options):  # noqa: ANN201 - pyarrow.fs.S3FileSystem, imported lazily
    import pyarrow.fs as pafs

    return pafs.S3FileSystem(
        access_key=options.access_key_id,
        secret_key=options.secret_access_key,
        endpoint_override=options.endpoint,
        region=options.region,
        force_virtual_addressing=not options.path_style,
        connect_timeout=5,
        request_timeout=60,
        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=5),
    )


class Location:
    """One file or folder of the lake's own durable files (not Iceberg's: Iceberg writes its own)."""

    uri: str

    def __truediv__(self, name: str) -> Location:
        raise NotImplementedError

    @property
    def name(self) -> str:
        return self.uri.rstrip("/").rsplit("/", 1)[-1]

    @property
    def hadoop(self) -> str:
        """The location as Spark's Hadoop file systems take it (streaming checkpoints, Delta)."""
        raise NotImplementedError

    @property
    def local(self) -> Path | None:
        """The local path, or None in an object store."""
        return None

    def exists(self) -> bool:
        raise NotImplementedError

    def is_dir(self) -> bool:
        raise NotImplementedError

    def read_bytes(self) -> bytes:
        raise NotImplementedError

    def read_text(self) -> str:
        return self.read_bytes().decode("utf-8")

    def write_bytes(self, data: bytes) -> None:
        """Write the file atomically (whole or not at all), durably."""
        raise NotImplementedError

    def write_text(self, text: str) -> None:
        self.write_bytes(text.encode("utf-8"))

    def children(self) -> list[str]:
        """Names of the files and folders directly in this folder (none if it does not exist)."""
        raise NotImplementedError

    def remove(self) -> None:
        """Remove the file, or the folder with everything in it; nothing if it is not there. (In an
        object store an empty folder marker may stay behind: it holds nothing and lists nothing.)"""
        raise NotImplementedError

    def sync(self) -> None:
        """Make the folder's list of entries durable (a local fsync; nothing on S3)."""

    def __repr__(self) -> str:
        return self.uri

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Location) and other.uri == self.uri

    def __hash__(self) -> int:
        return hash(self.uri)


class LocalLocation(Location):
    def __init__(self, path: Path):
        self.path = Path(path)
        self.uri = str(self.path)

    def __truediv__(self, name: str) -> LocalLocation:
        return LocalLocation(self.path / name)

    @property
    def hadoop(self) -> str:
        return str(self.path)

    @property
    def local(self) -> Path:
        return self.path

    def exists(self) -> bool:
        return self.path.exists()

    def is_dir(self) -> bool:
        return self.path.is_dir()

    def read_bytes(self) -> bytes:
        return self.path.read_bytes()

    def write_bytes(self, data: bytes) -> None:
        replace_file(self.path, data, durable=True)

    def children(self) -> list[str]:
        try:
            return sorted(entry.name for entry in os.scandir(self.path))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def remove(self) -> None:
        import shutil

        if self.path.is_dir() and not self.path.is_symlink():
            shutil.rmtree(self.path, ignore_errors=True)
        else:
            self.path.unlink(missing_ok=True)

    def sync(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class S3Location(Location):
    def __init__(self, uri: str, options: S3Options):
        bucket, key = split_s3(uri)
        self.bucket, self.key, self.options = bucket, key, options
        self.uri = f"s3://{bucket}/{key}" if key else f"s3://{bucket}"

    @property
    def _fs(self):  # noqa: ANN202
        return s3_filesystem(self.options)

    @property
    def _path(self) -> str:
        return f"{self.bucket}/{self.key}" if self.key else self.bucket

    def __truediv__(self, name: str) -> S3Location:
        return S3Location(f"{self.uri}/{name.strip('/')}", self.options)

    @property
    def hadoop(self) -> str:
        return f"s3a://{self._path}"

    def _info(self):  # noqa: ANN202
        return self._fs.get_file_info(self._path)

    def exists(self) -> bool:
        import pyarrow.fs as pafs

        return self._info().type != pafs.FileType.NotFound

    def is_dir(self) -> bool:
        import pyarrow.fs as pafs

        return self._info().type == pafs.FileType.Directory

    def read_bytes(self) -> bytes:
        with self._fs.open_input_stream(self._path) as stream:
            return stream.read()

    def write_bytes(self, data: bytes) -> None:
        with self._fs.open_output_stream(self._path) as stream:  # one PUT: visible whole, or not at all
            stream.write(data)

    def children(self) -> list[str]:
        import pyarrow.fs as pafs

        try:
            infos = self._fs.get_file_info(pafs.FileSelector(self._path, allow_not_found=True))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(info.base_name for info in infos)

    def remove(self) -> None:
        import pyarrow.fs as pafs

        info = self._info()
        if info.type == pafs.FileType.Directory:
            self._fs.delete_dir_contents(self._path, missing_dir_ok=True)
            # A server may leave a sub-folder emptied by that bulk delete listed as a prefix (s3proxy's
            # file-system store, when a folder's last object and its marker go in one request, keeps the
            # empty directory): its marker written and deleted again removes it.
            for name in self.children():
                try:
                    self._fs.create_dir(f"{self._path}/{name}")
                    self._fs.delete_dir(f"{self._path}/{name}")
                except (FileNotFoundError, OSError):
                    pass
            try:
                self._fs.delete_dir(self._path)
            except (FileNotFoundError, OSError):
                pass
        elif info.type == pafs.FileType.File:
            self._fs.delete_file(self._path)


def location(uri: str | Path, options: S3Options | None = None) -> Location:
    """A Location for a local path (or file: URI) or an s3:// URI."""
    text = str(uri)
    if is_remote(text):
        return S3Location(text, options or S3Options())
    if text.startswith("file:"):
        text = unquote(urlparse(text).path)
    return LocalLocation(Path(text))


def as_location(place: Location | Path) -> Location:
    """A Location as it is; a local Path as a LocalLocation."""
    return place if isinstance(place, Location) else LocalLocation(Path(place))


def arrow_file(uri: str, options: S3Options | None = None):  # noqa: ANN201 - (pyarrow FileSystem, path)
    """pyarrow's file system and path for a data file as Iceberg names it (a local path, file: or s3:// URI)."""
    import pyarrow.fs as pafs

    if is_remote(uri):
        bucket, key = split_s3(uri)
        return s3_filesystem(options or S3Options()), f"{bucket}/{key}"
    text = unquote(urlparse(uri).path) if uri.startswith("file:") else uri
    return pafs.LocalFileSystem(), text
