"""What drives Spark and Iceberg through Spark: the session, set-wise envelope parsing, mirror MERGE, direct
writes, commits, compaction; `batch`, `stream`, `views` and `sinks` below."""

if __name__ != "lakemv.spark":  # the folder is mapped into the lakemv namespace (pyproject.toml)
    raise ImportError(f"import lakemv.spark, not {__name__}: a second copy would have its own state")
