"""What one batch is, apart from the engine: its journal and its result."""
