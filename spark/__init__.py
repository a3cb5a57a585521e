"""How views are computed: envelope parsing, mirror MERGE, streaming ingest, on Spark."""

if __name__ != "lakemv.spark":  # the folder is mapped into the lakemv namespace (pyproject.toml)
    raise ImportError(f"import lakemv.spark, not {__name__}: a second copy would have its own state")
