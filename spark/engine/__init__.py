"""The engine: a batch's set-wise rounds on Spark's executors over the indexed state in Spark's state stores."""
