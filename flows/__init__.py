"""When things run: the `lakemv` CLI and (later) the Prefect flows it calls."""

if __name__ != "lakemv.flows":  # the folder is mapped into the lakemv namespace (pyproject.toml)
    raise ImportError(f"import lakemv.flows, not {__name__}: a second copy would have its own state")
