"""One unit of ingest on Spark, exactly once: the processor, and its steps on the local state."""
