"""Synthetic CDC workloads: the seed's GitHub model emitted as Debezium envelopes into landing files."""
