"""When things run: the `lakemv` CLI and (later) the Prefect flows it calls."""
