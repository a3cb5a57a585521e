"""Pure parts of the Kafka source and the data products: topic mapping, settings, sink declarations,
what a sink still has to deliver, and the messages it writes. No JVM, no broker."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from pydantic import ValidationError

from lakemv.catalog.brokers import check_bootstrap
from lakemv.catalog.declarations import parse_source
from lakemv.catalog.settings import LakeSettings
from lakemv.catalog.sinks import FeedSnapshot, Progress, Sink, declared_sinks, message_key, message_value, pending
from lakemv.catalog.streams import KafkaTopics
from lakemv.core.errors import ConfigError, ViewDefinitionError
from lakemv.core.planner import plan_view
from lakemv.core.planner.definitions import parse_view


def test_topics_follow_debezium_names_unless_a_source_declares_its_own(sources):
    settings = LakeSettings(kafka_topic_prefix="shop")
    topics = KafkaTopics.of(settings, sources)
    assert topics.tables["shop.public.users"] == "users"
    assert topics.collections["users"] == "public.users"
    assert topics.transaction_topic == "shop.transaction"
    assert "shop\\.transaction" in topics.pattern and "shop\\.public\\.pull_requests" in topics.pattern

    own = parse_source('name = "orders"\nprimary_key = ["id"]\ntopic = "erp.sales.orders_v2"\ncolumns = [{ name = "id", type = "bigint" }]', "orders.toml")
    topics = KafkaTopics.of(LakeSettings(kafka_transactions="off"), {"orders": own})
    assert topics.tables == {"erp.sales.orders_v2": "orders"}
    assert topics.collections == {"orders": "sales.orders_v2"}
    assert topics.transaction_topic is None


def test_two_sources_on_one_topic_are_a_config_error():
    a = parse_source('name = "a"\nprimary_key = ["id"]\ntopic = "t"\ncolumns = [{ name = "id", type = "bigint" }]', "a.toml")
    b = parse_source('name = "b"\nprimary_key = ["id"]\ntopic = "t"\ncolumns = [{ name = "id", type = "bigint" }]', "b.toml")
    with pytest.raises(ConfigError, match="topic 't' is declared for both a and b"):
        KafkaTopics.of(LakeSettings(), {"a": a, "b": b})


@pytest.mark.parametrize("good", ["127.0.0.1:9092", "kafka:9092", "a:1,b:2", "[::1]:9092"])
def test_broker_addresses_are_checked(good):
    assert check_bootstrap(f" {good} ") == good


@pytest.mark.parametrize("bad", ["", "kafka", "not an address", "host:port", "a:1;b:2"])
def test_a_bad_broker_address_is_a_usage_error(bad):
    with pytest.raises(ConfigError, match="expected HOST:PORT"):
        check_bootstrap(bad)


def test_json_settings_parse_and_stay_hashable(monkeypatch):
    monkeypatch.setenv("LAKEMV_KAFKA_OPTIONS", '{"security.protocol": "SSL", "client.id": "lakemv"}')
    monkeypatch.setenv("LAKEMV_SINKS", '{"user_profile": "kafka, delta", "repo_summary": ["kafka"]}')
    settings = LakeSettings()
    assert settings.kafka_options == (("client.id", "lakemv"), ("security.protocol", "SSL"))
    assert settings.sinks == (("repo_summary", ("kafka",)), ("user_profile", ("kafka", "delta")))
    hash(settings)
    monkeypatch.setenv("LAKEMV_SINKS", "{user_profile")
    with pytest.raises(ValidationError, match="not a JSON object of view -> sinks"):
        LakeSettings()


def _plans(sources, *texts: tuple[str, str]):
    return [plan_view(parse_view(text, name), sources) for name, text in texts]


def test_sinks_come_from_view_headers_and_settings_once_each(sources, tmp_path: Path):
    header = "-- @key: email\n-- @sink: kafka, Delta, kafka\nSELECT u.email, u.username FROM users u"
    plain_view = "-- @key: owner, name\nSELECT r.owner, r.name, r.description FROM repos r"
    plans = _plans(sources, ("people", header), ("repos_view", plain_view))
    assert plans[0].definition.sinks == ("kafka", "delta")
    settings = LakeSettings(warehouse=tmp_path, sinks={"repos_view": ["kafka"], "people": ["kafka"]}, product_topic_prefix="prod")
    sinks = {(s.view, s.kind): s for s in declared_sinks(settings, plans)}
    assert set(sinks) == {("people", "kafka"), ("people", "delta"), ("repos_view", "kafka")}
    assert sinks[("people", "kafka")].target == "prod.people"
    assert sinks[("people", "delta")].target == str(tmp_path.resolve() / "delta" / "people")
    assert sinks[("repos_view", "kafka")].key == ("owner", "name")
    assert sinks[("people", "kafka")].id == "lakemv.lake.people.kafka"


def test_a_sink_for_an_unknown_view_or_kind_is_refused_with_the_choices(sources):
    plans = _plans(sources, ("people", "-- @key: email\nSELECT u.email FROM users u"))
    with pytest.raises(ConfigError, match="sink for unknown view 'nobody'; views are people"):
        declared_sinks(LakeSettings(sinks={"nobody": ["kafka"]}), plans)
    with pytest.raises(ConfigError, match="unknown sink 's3' for view people; known: kafka, delta"):
        declared_sinks(LakeSettings(sinks={"people": ["s3"]}), plans)
    with pytest.raises(ViewDefinitionError, match="@sink: unknown sink 'parquet'"):
        parse_view("-- @key: email\n-- @sink: parquet\nSELECT u.email FROM users u", "people")


def _history(*ids: int, compaction: int | None = None) -> list[FeedSnapshot]:
    snapshots, parent = [], None
    for sequence, snapshot in enumerate(ids, start=1):
        snapshots.append(FeedSnapshot(snapshot, parent, sequence, 1_000 * sequence, append=snapshot != compaction))
        parent = snapshot
    return snapshots


def test_a_sink_delivers_the_appends_after_its_progress_in_order():
    history = _history(10, 11, 12, 13, compaction=12)
    todo, resync = pending(history, Progress(11, 2))
    assert [s.snapshot_id for s in todo] == [13] and not resync  # the compaction adds no change
    assert pending(history, Progress(13, 4)) == ([], False)


def test_a_new_sink_or_a_rebuilt_feed_publishes_the_whole_view():
    history = _history(10, 11)
    assert pending(history, None) == ([], True)  # never delivered
    assert pending(history, Progress(99, 7)) == ([], True)  # progress outside the feed's history
    assert pending(history, Progress(None, 0)) == ([], True)  # published while the feed was empty
    assert pending([], Progress(None, 0)) == ([], False)


def test_messages_are_the_key_and_the_row_as_json_and_a_tombstone_for_a_delete():
    sink = Sink("orders_view", "kafka", "lakemv.orders_view", ("id",), ("id", "total", "day", "at", "lines"), "lake")
    row = {
        "id": 7, "total": Decimal("12.50"), "day": date(2026, 11, 24), "at": datetime(2026, 11, 24, 9, 30, tzinfo=UTC),
        "lines": [{"sku": "a", "qty": 2}],
    }  # fmt: skip
    assert message_key(sink, row) == b'{"id":7}'
    assert json.loads(message_value(sink, row)) == {
        "id": 7, "total": "12.50", "day": "2026-11-24", "at": "2026-11-24T09:30:00Z", "lines": [{"sku": "a", "qty": 2}],
    }  # fmt: skip
    assert message_value(sink, None) is None


def test_the_maintain_deployment_ingests_from_kafka_when_given_brokers(tmp_path: Path):
    from lakemv.flows.deployments import Schedules, deployments

    maintain = deployments(None, tmp_path, Schedules(), kafka="127.0.0.1:9092")[0]
    assert maintain.parameters["kafka"] == "127.0.0.1:9092" and "landing" not in maintain.parameters
    maintain = deployments(tmp_path / "landing", tmp_path, Schedules())[0]
    assert "kafka" not in maintain.parameters and maintain.parameters["landing"].endswith("landing")


def test_the_compact_deployment_expires_snapshots_as_serve_is_told(tmp_path: Path):
    from lakemv.flows.deployments import Schedules, deployments

    compact = deployments(tmp_path / "landing", tmp_path, Schedules(retention_hours=0.25))[1]
    assert compact.name == "lakemv-compact" and compact.parameters["retention_hours"] == 0.25
    assert "retention_hours" not in deployments(tmp_path / "landing", tmp_path, Schedules())[1].parameters
