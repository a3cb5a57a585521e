"""Where data lives: source declarations, settings, and the Iceberg catalog `lake` for every engine."""

if __name__ != "lakemv.catalog":  # the folder is mapped into the lakemv namespace (pyproject.toml)
    raise ImportError(f"import lakemv.catalog, not {__name__}: a second copy would have its own state")
