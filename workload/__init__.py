"""Synthetic CDC workloads: the seed's GitHub model emitted as Debezium envelopes into landing files."""

if __name__ != "lakemv.workload":  # the folder is mapped into the lakemv namespace (pyproject.toml)
    raise ImportError(f"import lakemv.workload, not {__name__}: a second copy would have its own state")
