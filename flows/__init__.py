"""When things run: the Prefect flows (ingest, compact, verify, backfill), their deployments and server, and
the `lakemv` CLI that runs them."""

if __name__ != "lakemv.flows":  # the folder is mapped into the lakemv namespace (pyproject.toml)
    raise ImportError(f"import lakemv.flows, not {__name__}: a second copy would have its own state")
