"""What runs without a JVM: CDC semantics, the planner, SQL text, the batch plan, the local state.

Nothing under `lakemv.core` imports pyspark, py4j or `lakemv.spark` (tests/unit/test_layers.py).
"""

if __name__ != "lakemv.core":  # the folder is mapped into the lakemv namespace (pyproject.toml)
    raise ImportError(f"import lakemv.core, not {__name__}: a second copy would have its own state")
