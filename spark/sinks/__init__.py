"""Data products: each view's change feed published to Kafka and Delta Lake."""
