"""View maintenance on Spark: build, incremental step, write, backfill, view state."""
