"""Kafka brokers from Python (no Spark): an address checked before anything starts, brokers reached
before Spark's source would wait for them forever, and how far a stream is behind its topics."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from lakemv.core.errors import ConfigError

_ADDRESS = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:\d+(,[A-Za-z0-9_.\-\[\]:]+:\d+)*$")


def check_bootstrap(bootstrap: str, where: str = "--kafka") -> str:
    """`HOST:PORT[,HOST:PORT...]`, or a usage error saying what was expected (and where it came from)."""
    text = bootstrap.strip()
    if not _ADDRESS.match(text):
        raise ConfigError(f"expected HOST:PORT (comma-separated for several brokers), got {bootstrap!r}", where)
    return text


def reach_brokers(bootstrap: str, options: Sequence[tuple[str, str]] = (), timeout: float = 10.0) -> None:
    """ConfigError unless a broker at `bootstrap` answers within `timeout` (Spark's Kafka source would
    wait for one forever)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    conf = {"bootstrap.servers": bootstrap, "log_level": 0, **dict(options)}  # its log lines would repeat our one
    try:
        AdminClient(conf).list_topics(timeout=timeout)
    except KafkaException as exc:
        raise ConfigError(
            f"no Kafka broker answered at {bootstrap} within {timeout:.0f} s ({exc.args[0].str() if exc.args else exc}): "
            "start Kafka (lakemv stack up), or fix --kafka / LAKEMV_KAFKA_BOOTSTRAP",
            "--kafka",
        ) from None


def records_behind(bootstrap: str, pattern: str, consumed: Mapping[tuple[str, int], int], options: Sequence[tuple[str, str]] = ()) -> int:
    """Records in the stream's topics past what it consumed (a topic it has not read yet counts whole)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lakemv-status", "enable.auto.commit": False, "log_level": 0, **dict(options)})
    try:
        matching = re.compile(pattern)
        behind = 0
        for topic, meta in consumer.list_topics(timeout=5).topics.items():
            if not matching.match(topic):
                continue
            for partition in meta.partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=5)
                behind += max(0, high - max(low, consumed.get((topic, partition), low)))
        return behind
    finally:
        consumer.close()
