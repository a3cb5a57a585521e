"""Structured Streaming sources feeding batches: landing files and Kafka."""
