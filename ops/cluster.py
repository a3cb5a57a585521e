"""The scale-out stack as local processes on loopback: an object store, a REST catalog, a Spark cluster.

`lakemv cluster up|down|status|env` runs, without Docker, what `docker-compose.yml` describes for the
lake's side of a scale-out deployment:

* s3proxy, an S3-compatible object store over a folder (the bucket holds the warehouse: Iceberg's
  tables, the streaming checkpoints with lakemv's journals, the Delta products);
* Iceberg's REST catalog server (the `apache/iceberg-rest-fixture` image's server), its catalog a
  JDBC catalog in SQLite, its FileIO S3FileIO on the same bucket;
* a Spark standalone master and N workers, started with pyspark's own `spark-class`.

lakemv is then pointed at them by settings alone (`lakemv cluster env` prints them): the Spark
driver runs in lakemv's process as always, its executors on the workers. The jars come from Maven
(`jvm/scaleout/pom.xml` for the two servers, `jvm/pom.xml` for Spark's side, fetched by `make
setup`). Everything lives in one folder (ports in `cluster.json`, data, logs, pids): `up` again
resumes with the same bucket and catalog; `down --purge` removes it all.
"""

from __future__ import annotations

import glob
import json
import os
import secrets
import shutil
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lakemv.catalog.settings import PROJECT_ROOT
from lakemv.catalog.storage import S3Options, s3_filesystem
from lakemv.core.errors import ConfigError
from lakemv.core.runtime.ports import free_port
from lakemv.ops.services import ComponentStatus, Services, ServicesStatus, alive, port_open

SCALEOUT_LIB = PROJECT_ROOT / "jvm" / "scaleout" / "lib"
SPARK_LIB = PROJECT_ROOT / "jvm" / "lib"
LOOPBACK = "127.0.0.1"


@dataclass
class ClusterConfig:
    """Where the cluster lives, its loopback ports (chosen free on the first `up`, then kept) and sizes."""

    folder: Path
    workers: int = 1
    worker_cores: int = 1
    worker_memory: str = "2g"
    bucket: str = "lake"
    prefix: str = "warehouse"
    access_key: str = "lakemv"
    secret_key: str = ""
    s3_port: int = 0
    rest_port: int = 0
    master_port: int = 0
    master_ui_port: int = 0
    worker_ports: list[int] = field(default_factory=list)

    @classmethod
    def load(cls, folder: Path) -> ClusterConfig:
        folder = folder.expanduser().resolve()
        path = folder / "cluster.json"
        if not path.exists():
            return cls(folder)
        data = json.loads(path.read_text())
        return cls(folder=folder, **{k: v for k, v in data.items() if k != "folder"})

    def save(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        data = {k: v for k, v in asdict(self).items() if k != "folder"}
        path = self.folder / "cluster.json"
        path.write_text(json.dumps(data, indent=2))
        path.chmod(0o600)  # it holds the object store's secret

    @property
    def s3_endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.s3_port}"

    @property
    def catalog_uri(self) -> str:
        return f"http://{LOOPBACK}:{self.rest_port}"

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.master_port}"

    @property
    def warehouse(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    @property
    def s3(self) -> S3Options:
        return S3Options(self.s3_endpoint, self.access_key, self.secret_key, "us-east-1", True)

    def settings_env(self, *, spark: bool = True) -> dict[str, str]:
        """The LAKEMV_* settings that point lakemv at this cluster (`spark=False`: the object store and
        catalog only, Spark on the driver's own threads)."""
        env = {
            "LAKEMV_WAREHOUSE": self.warehouse,
            "LAKEMV_CATALOG_URI": self.catalog_uri,
            "LAKEMV_S3_ENDPOINT": self.s3_endpoint,
            "LAKEMV_S3_ACCESS_KEY_ID": self.access_key,
            "LAKEMV_S3_SECRET_ACCESS_KEY": self.secret_key,
            "LAKEMV_S3_REGION": "us-east-1",
            "LAKEMV_S3_PATH_STYLE": "true",
        }
        if spark:
            env |= {"LAKEMV_SPARK_MASTER": self.master_url, "LAKEMV_DRIVER_HOST": LOOPBACK}
        return env


def rest_catalog_env(warehouse: str, s3_endpoint: str, access_key: str, secret_key: str, database: str) -> dict[str, str]:
    """The REST catalog server's settings: RESTCatalogServer reads its catalog's properties from CATALOG_*
    variables (`_` is a `.`, `__` a `-`: CATALOG_S3_PATH__STYLE__ACCESS is s3.path-style-access), as the
    apache/iceberg-rest-fixture image does (docker-compose.yml sets the same)."""
    return {
        "CATALOG_URI": database,
        "CATALOG_JDBC_SCHEMA__VERSION": "V1",
        "CATALOG_WAREHOUSE": warehouse,
        "CATALOG_IO__IMPL": "org.apache.iceberg.aws.s3.S3FileIO",
        "CATALOG_S3_ENDPOINT": s3_endpoint,
        "CATALOG_S3_PATH__STYLE__ACCESS": "true",
        "CATALOG_S3_ACCESS__KEY__ID": access_key,
        "CATALOG_S3_SECRET__ACCESS__KEY": secret_key,
        "CATALOG_CLIENT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
    }


def _pyspark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _one(pattern: str, what: str) -> str:
    found = sorted(glob.glob(pattern))
    if not found:
        raise ConfigError(f"{what} is missing: run `make setup`", pattern)
    return found[-1]


class Cluster(Services):
    """Start, stop and inspect the local scale-out stack kept in `config.folder`."""

    def __init__(self, config: ClusterConfig):
        super().__init__(config.folder)
        self.config = config

    def _java(self, name: str, *args: str, heap: str) -> list[str]:
        # -Dlakemv.folder names the folder on the command line: Services recognises its processes by it.
        return [
            "java", f"-Xmx{heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
            f"-Dlakemv.folder={self.folder}", f"-Dlakemv.component={name}", *args,
        ]  # fmt: skip

    # ---- the object store -----------------------------------------------------------------------
    def _start_s3(self) -> None:
        if alive(self._pid("s3")):
            return
        c = self.config
        jar = _one(str(SCALEOUT_LIB / "s3proxy" / "s3proxy-*.jar"), "the s3proxy jar (jvm/scaleout/pom.xml)")
        data = self.folder / "s3"
        data.mkdir(parents=True, exist_ok=True)
        properties = self.folder / "s3proxy.properties"
        properties.write_text(
            f"s3proxy.endpoint=http://{LOOPBACK}:{c.s3_port}\n"
            "s3proxy.authorization=aws-v2-or-v4\n"
            f"s3proxy.identity={c.access_key}\n"
            f"s3proxy.credential={c.secret_key}\n"
            "jclouds.provider=filesystem-nio2\n"
            f"jclouds.filesystem.basedir={data}\n"
        )
        properties.chmod(0o600)
        self._spawn("s3", self._java("s3", "-jar", jar, "--properties", str(properties), heap="384m"))
        self._wait("s3", lambda: port_open(c.s3_port), 60)
        self._ensure_bucket()

    def _ensure_bucket(self) -> None:
        import pyarrow.fs as pafs

        c = self.config
        fs = s3_filesystem(c.s3)
        if fs.get_file_info(c.bucket).type == pafs.FileType.NotFound:
            pafs.S3FileSystem(
                access_key=c.access_key, secret_key=c.secret_key, endpoint_override=c.s3_endpoint,
                region="us-east-1", allow_bucket_creation=True,
            ).create_dir(c.bucket)  # fmt: skip

    # ---- the REST catalog -------------------------------------------------------------------------
    def _start_rest(self) -> None:
        if alive(self._pid("rest")):
            return
        c = self.config
        rest = SCALEOUT_LIB / "rest"
        jars = _pyspark_home() / "jars"
        _one(str(rest / "iceberg-open-api-*-test-fixtures.jar"), "Iceberg's REST catalog server (jvm/scaleout/pom.xml)")
        classpath = os.pathsep.join(
            [
                f"{rest}/*",
                _one(str(SPARK_LIB / "iceberg-aws-bundle-*.jar"), "the Iceberg AWS bundle (jvm/pom.xml)"),
                _one(str(jars / "hadoop-client-api-*.jar"), "pyspark's Hadoop client"),
                _one(str(jars / "hadoop-client-runtime-*.jar"), "pyspark's Hadoop client"),
            ]
        )
        (self.folder / "rest").mkdir(parents=True, exist_ok=True)
        env = rest_catalog_env(c.warehouse, c.s3_endpoint, c.access_key, c.secret_key, f"jdbc:sqlite:{self.folder / 'rest' / 'catalog.db'}")
        env["CATALOG_REST_PORT"] = str(c.rest_port)
        self._spawn("rest", self._java(
            # at INFO the server logs each table's properties, the object store's secret among them
            "rest", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath, "org.apache.iceberg.rest.RESTCatalogServer", heap="384m"
        ), env=env)
        self._wait("rest", self._rest_ready, 60)

    def _rest_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.config.catalog_uri}/v1/config", timeout=2) as response:  # noqa: S310 - loopback
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    # ---- Spark standalone ---------------------------------------------------------------------------
    def _spark_env(self, name: str) -> dict[str, str]:
        home = _pyspark_home()
        local = self.folder / name / "local"
        local.mkdir(parents=True, exist_ok=True)
        return {
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": LOOPBACK,
            "SPARK_LOCAL_DIRS": str(local),
            "SPARK_DAEMON_JAVA_OPTS": f"-Dlakemv.folder={self.folder} -Dlakemv.component={name}",
        }

    def _spark_properties(self) -> Path:
        """The daemons' properties file; being in the folder, it also names the folder on their command
        lines, where Services recognises its processes (spark-class is a shell script at first)."""
        path = self.folder / "spark-daemons.conf"
        # an application's files (the jars it ships) are removed from a worker a minute after it ends
        path.write_text(
            "spark.worker.cleanup.enabled true\nspark.worker.cleanup.interval 60\nspark.worker.cleanup.appDataTtl 60\n"
        )
        return path

    def _spark_class(self) -> str:
        return str(_pyspark_home() / "bin" / "spark-class")

    def _start_master(self) -> None:
        if alive(self._pid("master")):
            return
        c = self.config
        command = [
            self._spark_class(), "org.apache.spark.deploy.master.Master",
            "--host", LOOPBACK, "--port", str(c.master_port), "--webui-port", str(c.master_ui_port),
            "--properties-file", str(self._spark_properties()),
        ]  # fmt: skip
        self._spawn("master", command, env=self._spark_env("master"))
        self._wait("master", lambda: self._master_state() is not None, 60)

    def _master_state(self) -> dict | None:
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{self.config.master_ui_port}/json/", timeout=2) as response:  # noqa: S310
                return json.loads(response.read())
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def alive_workers(self) -> int:
        state = self._master_state() or {}
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def _start_worker(self, index: int) -> None:
        name = f"worker-{index}"
        if alive(self._pid(name)):
            return
        c = self.config
        work = self.folder / name / "work"
        work.mkdir(parents=True, exist_ok=True)
        command = [
            self._spark_class(), "org.apache.spark.deploy.worker.Worker", c.master_url,
            "--host", LOOPBACK, "--cores", str(c.worker_cores), "--memory", c.worker_memory,
            "--work-dir", str(work), "--webui-port", str(c.worker_ports[index]),
            "--properties-file", str(self._spark_properties()),
        ]  # fmt: skip
        self._spawn(name, command, env=self._spark_env(name))

    # ---- the commands -------------------------------------------------------------------------
    def up(self, *, spark: bool = True) -> ServicesStatus:
        """Start whatever is not running: the object store, the REST catalog and (`spark`) the Spark
        master and workers; wait until each answers."""
        c = self.config
        self.folder.mkdir(parents=True, exist_ok=True)
        if not c.secret_key:
            c.secret_key = secrets.token_hex(16)
        for port in ("s3_port", "rest_port", "master_port", "master_ui_port"):
            if not getattr(c, port):
                setattr(c, port, free_port())
        while len(c.worker_ports) < c.workers:
            c.worker_ports.append(free_port())
        c.save()
        self._start_s3()
        self._start_rest()
        if spark:
            self._start_master()
            for index in range(c.workers):
                self._start_worker(index)
            self._wait("master", lambda: self.alive_workers() >= c.workers, 90)
        return self.status()

    def down(self, purge: bool = False) -> None:
        """Stop the workers, the master, the catalog and the object store; with `purge`, remove the folder."""
        for index in range(max(self.config.workers, len(self.config.worker_ports))):
            self._stop(f"worker-{index}")
        for name in ("master", "rest", "s3"):
            self._stop(name)
        if purge:
            shutil.rmtree(self.folder, ignore_errors=True)

    def status(self) -> ServicesStatus:
        c = self.config
        s3, rest, master = self._pid("s3"), self._pid("rest"), self._pid("master")
        components = [
            ComponentStatus("s3", alive(s3) and port_open(c.s3_port), s3, c.s3_endpoint, f"s3proxy, bucket {c.bucket}"),
            ComponentStatus("rest", alive(rest) and self._rest_ready(), rest, c.catalog_uri, f"Iceberg REST catalog, warehouse {c.warehouse}"),
        ]
        if self._pid_file("master").exists() or alive(master):
            workers = self.alive_workers() if alive(master) else 0
            components.append(
                ComponentStatus("master", alive(master), master, c.master_url, f"{workers} of {c.workers} workers alive")
            )
            for index in range(c.workers):
                pid = self._pid(f"worker-{index}")
                components.append(
                    ComponentStatus(f"worker-{index}", alive(pid), pid, f"{LOOPBACK}:{c.worker_ports[index]}", f"{c.worker_cores} cores, {c.worker_memory}")
                )
        return ServicesStatus(components)


