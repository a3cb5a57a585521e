"""Local services for development and tests: the real CDC stack and the scale-out cluster on loopback."""

if __name__ != "lakemv.ops":  # the folder is mapped into the lakemv namespace (pyproject.toml)
    raise ImportError(f"import lakemv.ops, not {__name__}: a second copy would have its own state")
