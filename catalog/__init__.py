"""Where data lives: source declarations, settings, and the Iceberg catalog `lake` for every engine."""
