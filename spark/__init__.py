"""How views are computed: envelope parsing, mirror MERGE, streaming ingest, on Spark."""
