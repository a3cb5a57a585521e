"""Everything DuckDB does: the lake as DuckDB views (`query`), the independent `verify`, `status`."""

if __name__ != "lakemv.duck":  # the folder is mapped into the lakemv namespace (pyproject.toml)
    raise ImportError(f"import lakemv.duck, not {__name__}: a second copy would have its own state")
