"""docker-compose.yml documents the scale-out stack; keep it well-formed and consistent.

Its CDC part is the stack `lakemv stack up` runs as local processes (ops/stack.py): the same
versions (jvm/stack/pom.xml), broker settings, converters, connector and tables. Nothing here starts
a process: lakemv.ops.stack only writes Kafka's properties file into a temporary folder.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from lakemv.catalog.declarations import load_sources
from lakemv.catalog.settings import PROJECT_ROOT, LakeSettings
from lakemv.ops.stack import CONNECTOR, Stack, StackConfig

TABLES = ("payment_info", "pull_requests", "repos", "stars", "users")
# The connector settings that name the database: the local stack's loopback server, source-db here.
DATABASE_KEYS = ("database.hostname", "database.port", "database.user", "database.password", "database.dbname")
# Kafka properties that hold addresses or paths of this machine, not settings.
KAFKA_ADDRESS_KEYS = ("listeners", "advertised.listeners", "controller.quorum.voters", "log.dirs")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((PROJECT_ROOT / "docker-compose.yml").read_text())


def _tag(image: str) -> str:
    name, _, tag = image.rpartition(":")
    assert name and "/" not in tag, f"{image} names no tag"
    return tag


def _stack_versions() -> dict[str, str]:
    root = ET.parse(PROJECT_ROOT / "jvm" / "stack" / "pom.xml").getroot()
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    return {child.tag.split("}")[1]: (child.text or "").strip() for child in root.find("m:properties", ns)}


def _local_stack(folder: Path) -> Stack:
    """The stack `lakemv stack up` would run for the declared sources (not started)."""
    tables = tuple(sorted(load_sources([PROJECT_ROOT / "catalog" / "sources"])))
    return Stack(StackConfig(folder=folder, postgres_port=5432, tables=tables))


def _registered_connector(compose: dict) -> dict:
    init = compose["services"]["connector-init"]
    (mount,) = [c for c in init["configs"] if c["target"] == "/connector.json"]
    return json.loads(compose["configs"][mount["source"]]["content"])


def test_compose_file_declares_the_scale_out_stack(compose):
    services = compose["services"]
    cdc = {"source-db", "kafka", "connect", "connector-init"}
    assert cdc | {"s3", "rest-catalog", "spark-master", "spark-worker", "prefect-server", "lakemv"} <= set(services)
    for name, service in services.items():
        assert "image" in service, name
        for dependency in service.get("depends_on", []):
            assert dependency in services, f"{name} depends on undefined {dependency}"
        for config in service.get("configs", []):
            assert config["source"] in compose.get("configs", {}), f"{name} mounts undefined config {config['source']}"
    lakemv_env = services["lakemv"]["environment"]
    assert lakemv_env["LAKEMV_CATALOG_URI"].startswith("http://rest-catalog:")
    assert "wal_level=logical" in services["source-db"]["command"]


def test_compose_pins_the_versions_of_the_local_stack(compose):
    versions = _stack_versions()
    services = compose["services"]
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert _tag(services["kafka"]["image"]) == versions["kafka.version"]
    assert services["connect"]["image"].startswith("quay.io/debezium/connect:")
    assert _tag(services["connect"]["image"]).startswith(versions["debezium.version"])
    # the Debian PostgreSQL the tests and `lakemv stack up` use
    assert _tag(services["source-db"]["image"]) == "15"


def test_compose_kafka_has_the_settings_of_the_local_broker(compose, tmp_path):
    lines = _local_stack(tmp_path)._kafka_properties().read_text().splitlines()
    local = dict(line.split("=", 1) for line in lines if line)
    env = compose["services"]["kafka"]["environment"]
    served = {key.removeprefix("KAFKA_").lower().replace("_", "."): str(value) for key, value in env.items()}
    assert {k: v for k, v in served.items() if k not in KAFKA_ADDRESS_KEYS} == {
        k: v for k, v in local.items() if k not in KAFKA_ADDRESS_KEYS
    }
    assert set(KAFKA_ADDRESS_KEYS) <= set(served)
    assert served["process.roles"] == "broker,controller"
    for key in ("offsets.topic", "transaction.state.log", "share.coordinator.state.topic"):
        assert served[f"{key}.replication.factor"] == "1", key
    for key in ("transaction.state.log", "share.coordinator.state.topic"):
        assert served[f"{key}.min.isr"] == "1", key


def test_compose_connect_converts_as_the_local_worker(compose):
    connect = compose["services"]["connect"]
    env = {key: str(value) for key, value in connect["environment"].items()}
    json_converter = "org.apache.kafka.connect.json.JsonConverter"
    assert env["KEY_CONVERTER"] == env["VALUE_CONVERTER"] == json_converter
    assert env["CONNECT_KEY_CONVERTER_SCHEMAS_ENABLE"] == "false"
    assert env["CONNECT_VALUE_CONVERTER_SCHEMAS_ENABLE"] == "true"
    assert env["BOOTSTRAP_SERVERS"] == "kafka:9092"
    assert set(connect["depends_on"]) >= {"kafka"}


def test_compose_registers_the_connector_of_the_local_stack(compose, tmp_path):
    services = compose["services"]
    registered = _registered_connector(compose)
    assert registered["name"] == CONNECTOR
    served = registered["config"]
    stack = _local_stack(tmp_path)
    assert stack.config.tables == TABLES
    local = stack.connector_config()
    assert set(served) == set(local)
    assert {k: v for k, v in served.items() if k not in DATABASE_KEYS} == {
        k: v for k, v in local.items() if k not in DATABASE_KEYS
    }
    # the database differs by design: source-db's address and credentials, the same database name
    source_db = services[served["database.hostname"]]
    assert served["database.hostname"] == "source-db"
    assert served["database.port"] in {str(p).rsplit(":", 1)[-1] for p in source_db["ports"]}
    assert served["database.user"] == source_db["environment"]["POSTGRES_USER"]
    assert served["database.password"] == source_db["environment"]["POSTGRES_PASSWORD"]
    assert served["database.dbname"] == source_db["environment"]["POSTGRES_DB"] == local["database.dbname"]
    # registered once Connect runs, by a POST to its REST API
    init = services["connector-init"]
    assert "connect" in init["depends_on"]
    assert "http://connect:8083/connectors" in "\n".join(init["command"])
    # lakemv reads the topics that connector writes
    lakemv_env = services["lakemv"]["environment"]
    assert lakemv_env["LAKEMV_KAFKA_BOOTSTRAP"] == "kafka:9092"
    default_prefix = LakeSettings.model_fields["kafka_topic_prefix"].default
    assert lakemv_env["LAKEMV_KAFKA_TOPIC_PREFIX"] == served["topic.prefix"] == default_prefix


def test_compose_source_db_is_the_local_database(compose):
    from lakemv.workload.postgres import SIGNAL_TABLE_SQL, create_table_sql

    source_db = compose["services"]["source-db"]
    command = source_db["command"]
    for setting in ("wal_level=logical", "max_wal_senders=10", "max_replication_slots=10"):
        assert setting in command, setting
    # the tables `lakemv stack up` creates, created on source-db's first start
    (mount,) = [c for c in source_db["configs"] if c["target"].startswith("/docker-entrypoint-initdb.d/")]
    sources = load_sources([PROJECT_ROOT / "catalog" / "sources"])
    expected = "\n".join([*(f"{create_table_sql(sources[name])};" for name in sorted(sources)), f"{SIGNAL_TABLE_SQL};"])
    assert compose["configs"][mount["source"]]["content"].strip() == expected


def _properties(pom: Path) -> dict[str, str]:
    root = ET.parse(pom).getroot()
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    return {child.tag.split("}")[1]: (child.text or "").strip() for child in root.find("m:properties", ns)}


def test_compose_runs_the_lake_side_that_lakemv_cluster_runs(compose):
    """The object store, the REST catalog and Spark: the versions `lakemv cluster up` runs, the same
    catalog settings, and lakemv pointed at them by the same settings as `lakemv cluster env` prints."""
    import pyspark

    from lakemv.ops.cluster import ClusterConfig, rest_catalog_env

    versions = _properties(PROJECT_ROOT / "jvm" / "scaleout" / "pom.xml")
    services = compose["services"]
    assert services["s3"]["image"] == f"andrewgaul/s3proxy:{versions['s3proxy.version']}"
    assert services["rest-catalog"]["image"] == f"apache/iceberg-rest-fixture:{versions['iceberg.rest.version']}"
    for name in ("spark-master", "spark-worker", "lakemv"):
        assert _tag(services[name]["image"]).startswith(f"{pyspark.__version__}-"), name

    s3_env = services["s3"]["environment"]
    identity, secret = s3_env["S3PROXY_IDENTITY"], s3_env["S3PROXY_CREDENTIAL"]
    rest_env = {k: str(v) for k, v in services["rest-catalog"]["environment"].items()}
    expected = rest_catalog_env("s3://lake/warehouse", "http://s3:80", identity, secret, rest_env["CATALOG_URI"])
    assert {k: v for k, v in rest_env.items() if k != "CATALOG_REST_PORT"} == expected

    lakemv_env = {k: str(v) for k, v in services["lakemv"]["environment"].items()}
    local = ClusterConfig(Path("/unused"), access_key=identity, secret_key=secret, s3_port=80, rest_port=8181, master_port=7077)
    wanted = local.settings_env()
    assert set(wanted) <= set(lakemv_env), sorted(set(wanted) - set(lakemv_env))
    addresses = {"LAKEMV_S3_ENDPOINT", "LAKEMV_CATALOG_URI", "LAKEMV_SPARK_MASTER", "LAKEMV_DRIVER_HOST"}
    assert {k: lakemv_env[k] for k in wanted if k not in addresses} == {k: v for k, v in wanted.items() if k not in addresses}
    assert lakemv_env["LAKEMV_S3_ENDPOINT"] == "http://s3:80" and lakemv_env["LAKEMV_SPARK_MASTER"] == "spark://spark-master:7077"
    assert lakemv_env["LAKEMV_WAREHOUSE"] == rest_env["CATALOG_WAREHOUSE"]
    assert "LAKEMV_LOCAL_DIR" in lakemv_env, "the driver's local state on a volume of its own"
