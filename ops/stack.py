"""The real CDC stack as local processes on loopback: PostgreSQL → Debezium (Kafka Connect) → Kafka.

`lakemv stack up|down|status` runs, without Docker, what `docker-compose.yml` describes for servers:

* PostgreSQL from the Debian package (`make setup` installs it), `wal_level=logical`, a database
  with a table per declared source (`lakemv.workload.postgres` has the DDL);
* one Kafka broker in KRaft mode (it is its own controller), every replication factor 1;
* Kafka Connect standalone with Debezium's PostgreSQL connector (pgoutput), transaction metadata on,
  values as JSON with their Connect schema (lakemv decodes decimals and times by it).

The jars come from Maven (`jvm/stack/pom.xml`, fetched by `make setup`). Everything lives in one
folder (ports in `stack.json`, data, logs, pids): `up` again resumes where `down` stopped, Connect
from its offsets file with no new snapshot; `down --purge` removes it all, replication slot first.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from lakemv.catalog.declarations import SourceTable
from lakemv.catalog.settings import PROJECT_ROOT
from lakemv.core.errors import ConfigError
from lakemv.ops.postgres import USER, PostgresServer
from lakemv.core.runtime.ports import free_port
from lakemv.ops.services import ComponentStatus, Services, ServicesStatus, StackError, alive, port_open
from lakemv.workload.postgres import SIGNAL_TABLE

STACK_LIB = PROJECT_ROOT / "jvm" / "stack" / "lib"
CONNECTOR = "lakemv-postgres"


@dataclass
class StackConfig:
    """Where the stack lives and its loopback ports (chosen free on the first `up`, then kept)."""

    folder: Path
    postgres_port: int = 0
    kafka_port: int = 0
    controller_port: int = 0
    connect_port: int = 0
    database: str = "github"
    topic_prefix: str = "github"
    tables: tuple[str, ...] = ()
    transaction_metadata: bool = True
    cluster_id: str = ""
    kafka_heap: str = "512m"
    connect_heap: str = "512m"

    @classmethod
    def load(cls, folder: Path) -> StackConfig:
        folder = folder.expanduser().resolve()
        path = folder / "stack.json"
        if not path.exists():
            return cls(folder)
        data = json.loads(path.read_text())
        data["tables"] = tuple(data.get("tables", ()))
        return cls(folder=folder, **{k: v for k, v in data.items() if k != "folder"})

    def save(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        data = {k: v for k, v in asdict(self).items() if k != "folder"}
        (self.folder / "stack.json").write_text(json.dumps(data, indent=2))

    @property
    def postgres_url(self) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.postgres_port}/{self.database}"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def connect_url(self) -> str:
        return f"http://127.0.0.1:{self.connect_port}"


class Stack(PostgresServer, Services):
    """Start, stop and inspect the local stack kept in `config.folder`."""

    def __init__(self, config: StackConfig):
        super().__init__(config.folder)
        self.config = config
        self._admin = None  # one Kafka admin client for the readiness checks

    # ---- Kafka ----------------------------------------------------------------------------------
    def _java(self, main: str, *args: str, heap: str, log_level: str = "INFO") -> list[str]:
        if not list(STACK_LIB.glob("kafka_*.jar")):
            raise ConfigError("the CDC stack's jars are missing: run `make setup` (jvm/stack/pom.xml)", str(STACK_LIB))
        log4j = self.folder / "log4j2.properties"
        log4j.write_text(
            f"rootLogger.level = {log_level}\nrootLogger.appenderRef.out.ref = out\n"
            "appender.out.type = Console\nappender.out.name = out\nappender.out.layout.type = PatternLayout\n"
            "appender.out.layout.pattern = [%d] %p %m (%c)%n\n"
        )
        return [
            "java", f"-Xmx{heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j.as_uri()}", "-cp", f"{STACK_LIB}/*", main, *args,
        ]  # fmt: skip

    def _kafka_properties(self) -> Path:
        c = self.config
        path = self.folder / "kafka" / "server.properties"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.voters=1@127.0.0.1:{c.controller_port}",
                    f"listeners=PLAINTEXT://127.0.0.1:{c.kafka_port},CONTROLLER://127.0.0.1:{c.controller_port}",
                    f"advertised.listeners=PLAINTEXT://127.0.0.1:{c.kafka_port}",
                    "controller.listener.names=CONTROLLER",
                    "inter.broker.listener.name=PLAINTEXT",
                    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                    f"log.dirs={self.folder / 'kafka' / 'data'}",
                    "num.partitions=1",
                    "offsets.topic.replication.factor=1",
                    "offsets.topic.num.partitions=4",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    "transaction.state.log.num.partitions=4",
                    "share.coordinator.state.topic.replication.factor=1",
                    "share.coordinator.state.topic.min.isr=1",
                    "group.initial.rebalance.delay.ms=0",
                    "auto.create.topics.enable=true",
                    "log.cleaner.backoff.ms=1000",
                    "",
                ]
            )
        )
        return path

    def _start_kafka(self) -> None:
        if alive(self._pid("kafka")):
            return
        properties = self._kafka_properties()
        if not self.config.cluster_id:  # once: formatting again with a new id fails
            done = subprocess.run(self._java("kafka.tools.StorageTool", "random-uuid", heap="128m", log_level="WARN"),
                                  capture_output=True, text=True, check=True)  # fmt: skip
            self.config.cluster_id = done.stdout.strip().splitlines()[-1]
            self.config.save()
        format_ = self._java("kafka.tools.StorageTool", "format", "-t", self.config.cluster_id, "-c", str(properties),
                             "--ignore-formatted", heap="128m", log_level="WARN")  # fmt: skip
        done = subprocess.run(format_, capture_output=True, text=True)
        if done.returncode != 0:
            raise StackError(f"formatting Kafka's storage failed: {(done.stderr or done.stdout).strip()[-800:]}")
        self._spawn("kafka", self._java("kafka.Kafka", str(properties), heap=self.config.kafka_heap))
        self._wait("kafka", self._kafka_ready, 90)

    def _kafka_ready(self) -> bool:
        if not port_open(self.config.kafka_port):
            return False
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.config.bootstrap, "log_level": 3})
        try:
            self._admin.list_topics(timeout=2)
        except Exception:  # noqa: BLE001 - KafkaException while the broker starts
            return False
        return True

    # ---- Kafka Connect + Debezium -------------------------------------------------------------
    def connector_config(self) -> dict[str, str]:
        c = self.config
        return {
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "database.hostname": "127.0.0.1",
            "database.port": str(c.postgres_port),
            "database.user": USER,
            "database.password": USER,
            "database.dbname": c.database,
            "topic.prefix": c.topic_prefix,
            "plugin.name": "pgoutput",
            "slot.name": "lakemv",
            "publication.name": "lakemv",
            "publication.autocreate.mode": "filtered",
            "table.include.list": ",".join(f"public.{t}" for t in c.tables),
            "provide.transaction.metadata": str(c.transaction_metadata).lower(),
            "decimal.handling.mode": "precise",
            "tombstones.on.delete": "true",
            "snapshot.mode": "initial",
            # TRUNCATE reaches the lake (Debezium skips it by default); heartbeats keep the slot moving
            # while the tables are quiet (their topic is not lakemv's); the signal table starts
            # incremental snapshots (`INSERT INTO debezium_signal ... 'execute-snapshot'`).
            "skipped.operations": "none",
            "heartbeat.interval.ms": "10000",
            "signal.data.collection": f"public.{SIGNAL_TABLE}",
        }

    def _start_connect(self) -> None:
        if alive(self._pid("connect")):
            return
        c = self.config
        folder = self.folder / "connect"
        folder.mkdir(exist_ok=True)
        worker = folder / "worker.properties"
        worker.write_text(
            "\n".join(
                [
                    f"bootstrap.servers={c.bootstrap}",
                    "key.converter=org.apache.kafka.connect.json.JsonConverter",
                    "key.converter.schemas.enable=false",
                    "value.converter=org.apache.kafka.connect.json.JsonConverter",
                    "value.converter.schemas.enable=true",
                    f"offset.storage.file.filename={folder / 'offsets'}",
                    "offset.flush.interval.ms=1000",
                    f"listeners=http://127.0.0.1:{c.connect_port}",
                    "plugin.discovery=service_load",
                    "",
                ]
            )
        )
        connector = folder / "connector.properties"
        connector.write_text("\n".join([f"name={CONNECTOR}", *(f"{k}={v}" for k, v in self.connector_config().items()), ""]))
        main = "org.apache.kafka.connect.cli.ConnectStandalone"
        self._spawn("connect", self._java(main, str(worker), str(connector), heap=c.connect_heap))
        self._wait("connect", self._connector_running, 120)

    def _connector_running(self) -> bool:
        """True once the connector runs; a connector or task that failed ends the wait at once, with its trace."""
        state = self.connector_state()
        if state == "FAILED":
            raise StackError(f"the Debezium connector failed: {self._connector_trace()}\n(see {self.log('connect')})")
        return state == "RUNNING"

    def _connector_trace(self) -> str:
        try:
            with urllib.request.urlopen(f"{self.config.connect_url}/connectors/{CONNECTOR}/status", timeout=2) as response:
                status = json.load(response)
        except (urllib.error.URLError, OSError, ValueError):
            return "(no status)"
        traces = [status.get("connector", {}).get("trace")] + [t.get("trace") for t in status.get("tasks", [])]
        first = next((t for t in traces if t), "")
        return first.splitlines()[0] if first else "(no trace)"

    def connector_state(self) -> str | None:
        """The connector's and its task's state from Connect's REST API (RUNNING, FAILED, ...)."""
        try:
            with urllib.request.urlopen(f"{self.config.connect_url}/connectors/{CONNECTOR}/status", timeout=2) as response:
                status = json.load(response)
        except (urllib.error.URLError, OSError, ValueError):
            return None
        states = [status.get("connector", {}).get("state")] + [t.get("state") for t in status.get("tasks", [])]
        if not status.get("tasks"):
            return "STARTING"
        failed = [s for s in states if s != "RUNNING"]
        return failed[0] if failed else "RUNNING"

    # ---- the commands -------------------------------------------------------------------------
    def up(self, sources: Mapping[str, SourceTable]) -> ServicesStatus:
        """Start whatever is not running (PostgreSQL, Kafka, Connect), creating tables for `sources`."""
        c = self.config
        self.folder.mkdir(parents=True, exist_ok=True)
        for port in ("postgres_port", "kafka_port", "controller_port", "connect_port"):
            if not getattr(c, port):
                setattr(c, port, free_port())
        if not c.tables:
            c.tables = tuple(sorted(sources))
        c.save()
        self._start_postgres()
        self.create_tables({n: s for n, s in sources.items() if n in c.tables})
        self._start_kafka()
        self._start_connect()
        return self.status()

    def down(self, purge: bool = False) -> None:
        """Stop Connect, Kafka and PostgreSQL; with `purge`, drop the slot and remove the folder."""
        self._admin = None  # its background threads would keep calling a stopped broker
        self._stop("connect")
        if purge and self._postgres_pid() is not None:
            self.drop_slot()
        self._stop("kafka")
        if self._postgres_pid() is not None:
            self._pg("pg_ctl", "-D", str(self.postgres_home / "data"), "-m", "fast", "-w", "stop")
        if purge:
            shutil.rmtree(self.postgres_home, ignore_errors=True)
            shutil.rmtree(self.folder, ignore_errors=True)

    def restart(self, name: str) -> None:
        """Stop one component and start it again (Connect resumes from its offsets)."""
        self._admin = None
        self._stop(name)
        {"connect": self._start_connect, "kafka": self._start_kafka}[name]()

    def status(self) -> ServicesStatus:
        c = self.config
        pg = self._postgres_pid()
        kafka, connect = self._pid("kafka"), self._pid("connect")
        state = self.connector_state() if alive(connect) else None
        return ServicesStatus(
            [
                ComponentStatus("postgres", pg is not None, pg, c.postgres_url, f"database {c.database}, wal_level=logical"),
                ComponentStatus("kafka", alive(kafka) and port_open(c.kafka_port), kafka, c.bootstrap, "KRaft, one node"),
                ComponentStatus(
                    "connect", alive(connect) and state == "RUNNING", connect, c.connect_url,
                    f"connector {CONNECTOR}: {state or 'not running'}; topics {c.topic_prefix}.public.<table>",
                ),  # fmt: skip
            ]
        )
