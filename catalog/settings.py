"""One settings object for the whole lake: warehouse, catalog, Spark sizing (env prefix LAKEMV_)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import unquote, urlparse

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from lakemv.catalog.storage import S3_SCHEMES, Location, S3Options, is_remote, location
from lakemv.core.errors import ConfigError, redact

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def _json_object(value: Any, what: str) -> Any:
    """A setting given as JSON text in the environment, parsed; other values as they are."""
    if not isinstance(value, str):
        return value
    try:
        parsed = json.loads(value) if value.strip() else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"not a JSON object of {what} ({exc.msg})") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"expected a JSON object of {what}, found a JSON {type(parsed).__name__}")
    return parsed


# LAKEMV_ variables that are not settings: debugging, and the fault points the crash tests arm (lakemv.core.runtime.faults).
OTHER_VARIABLES = frozenset(
    {"LAKEMV_DEBUG", "LAKEMV_CRASH_AT", "LAKEMV_CRASH_SIGNAL", "LAKEMV_HOLD_AT", "LAKEMV_HOLD_SIGNAL",
     "LAKEMV_TEST_RUN", "LAKEMV_LOG", "LAKEMV_VIEW_EXAMPLES", "LAKEMV_SHAPE_EXAMPLES", "LAKEMV_EVENT_EXAMPLES"}
)  # fmt: skip


def unknown_variables(environ: dict[str, str]) -> list[str]:
    """A warning for each LAKEMV_ variable that is no setting (a typo is otherwise ignored in silence),
    naming the closest known one."""
    import difflib

    settings = sorted(f"LAKEMV_{name.upper()}" for name in LakeSettings.model_fields)
    warnings = []
    for name in sorted(n for n in environ if n.startswith("LAKEMV_") and n not in settings and n not in OTHER_VARIABLES):
        close = difflib.get_close_matches(name, settings, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        warnings.append(f"{name} is not a lakemv setting ({hint}see docs for the settings); it is ignored")
    return warnings


class LakeSettings(BaseSettings):
    """Settings with defaults that run the embedded stack: SQLite catalog + files under ./warehouse."""

    model_config = SettingsConfigDict(env_prefix="LAKEMV_", frozen=True, extra="forbid")

    warehouse: str = Field(
        default="warehouse",
        description="Where the lake lives: a folder, or an S3 prefix (s3://bucket/prefix) of any S3-compatible "
        "store (then LAKEMV_S3_*). The tables, the streaming checkpoints with their journals, and the Delta "
        "products go there.",
    )
    local_dir: Path | None = Field(
        default=None,
        description="The driver's own folder: the local indexed state, caches, the local Prefect server's "
        "database. Default: the warehouse folder; ./.lakemv when the warehouse is in an object store.",
    )
    s3_endpoint: str | None = Field(
        default=None, description="URL of an S3-compatible store (http://host:port); unset: AWS S3 itself."
    )
    s3_access_key_id: str | None = Field(default=None, description="S3 access key (unset: the AWS default chain).")
    s3_secret_access_key: SecretStr | None = Field(default=None, description="S3 secret key; it never prints, in errors, logs or `lakemv status`.")
    s3_region: str = Field(default="us-east-1", description="S3 region (S3-compatible stores accept any).")
    s3_path_style: bool = Field(
        default=True, description="Path-style requests (http://host/bucket/key), as S3-compatible stores want."
    )
    catalog_name: str = Field(
        default="lake", pattern=r"^[a-z][a-z0-9_]*$", description="The Iceberg catalog's name in Spark: tables are <name>.mirror.users, <name>.views.user_profile."
    )
    catalog_uri: str | None = Field(
        default=None,
        description="The Iceberg catalog: a REST catalog's URL (http://host:port), or the SQLAlchemy URL of a "
        "JDBC catalog database: sqlite:///path or postgresql://user:password@host:port/db. Default: sqlite "
        "under the warehouse (under the local folder when the warehouse is in an object store).",
    )
    sources_dirs: Annotated[tuple[Path, ...], NoDecode] = Field(
        default=(PROJECT_ROOT / "catalog" / "sources",),
        description="Folders of source declarations (*.toml), searched in order: a path, paths "
        "separated by commas, or a JSON list.",
    )
    views_dir: Path = Field(default=PROJECT_ROOT / "views", description="Folder of view definitions (*.sql).")
    extra_views_dir: Path | None = Field(
        default=None, description="A second folder of view definitions, e.g. a team's own views."
    )
    max_files_per_batch: int | None = Field(
        default=None, ge=1, description="Backpressure: at most this many landing files per batch (replaces the byte limit)."
    )
    max_bytes_per_batch: int = Field(
        default=64 << 20, ge=1, description="Backpressure: landing bytes per batch (a bigger single file still forms one batch)."
    )
    max_events_per_batch: int = Field(
        default=100_000, ge=1, description="Lines applied per unit: a bigger batch is applied in chunks of this size."
    )
    bulk_min_bytes: int | None = Field(
        default=None, ge=1, description="A batch of at least this many landing bytes is parsed set-wise by Spark "
        "(lakemv.spark.bulk) in one unit, instead of line by line in the driver in units of max_events_per_batch. "
        "Default: 32 MiB on a cluster; never with a local master, where the driver parses faster (README).",
    )
    max_line_chars: int = Field(
        default=4 << 20, ge=1024, description="A longer landing line is a dead letter, not parsed."
    )
    local_state: bool = Field(
        default=True,
        description="Keep the local indexed state (lakemv.core.state) next to the checkpoint: batches look rows up "
        "there instead of scanning the Iceberg tables.",
    )
    engine_state: bool = Field(
        default=False,
        description="Keep the views by the engine state (issue 68, being built): Spark's state stores on the executors "
        "(lakemv.spark.engine), every unit of landing files parsed set-wise, its views published and its ledger row "
        "committed last. Carries views over the declared tables (not over event sources or other views) from landing "
        "files (not Kafka) yet; once it carries every shape it replaces the local state.",
    )
    direct_writes: bool = Field(
        default=True, description="Commit a batch's small writes as Parquet files through Iceberg's API (appends, and "
        "position deletes of the rows they replace, whose places the local state keeps) instead of Spark MERGEs "
        "(lakemv.spark.directwrite).",
    )
    hold_backlog: bool = Field(
        default=True, description="While more of a backlog follows (a later unit of the batch; in `ingest --once` "
        "from landing files, files no batch has taken yet), views that can wait hold the keys they reach and are "
        "maintained once, at its end; false: every batch maintains them (they show a long catch-up's progress).",
    )
    view_workers: int = Field(
        default=4, ge=1, description="Views a batch maintains at once from the local state (each writes its own "
        "tables, so while one view's Spark job runs another plans or commits); 1 maintains them one by one.",
    )
    log_format: Literal["text", "json"] = Field(
        default="text", description="How `ingest` reports: a line of text per batch, or `json`: one JSON object per line "
        "(a batch's: its tables, dead letters, late events per source, and per view its keys, plan and reason); "
        "`ingest --log-format` sets it for one run.",
    )
    kafka_bootstrap: str | None = Field(
        default=None, description="Kafka brokers (HOST:PORT,...) to read Debezium's topics from; `ingest --kafka` sets it too."
    )
    kafka_topic_prefix: str = Field(
        default="github", pattern=r"^[A-Za-z0-9._-]+$", description="Debezium's topic.prefix: a table's topic is "
        "<prefix>.<schema>.<table> unless its declaration names a `topic`.",
    )
    kafka_schema: str = Field(default="public", pattern=r"^[A-Za-z0-9_]+$", description="The source database schema in topic names.")
    kafka_transactions: Literal["auto", "off"] = Field(
        default="auto", description="auto: a change that carries Debezium's transaction block is applied only with its "
        "whole transaction, in commit order (needs the transaction topic); off: every change as it comes.",
    )
    kafka_transaction_topic: str | None = Field(default=None, description="Debezium's transaction topic; default <prefix>.transaction.")
    kafka_options: Annotated[tuple[tuple[str, str], ...], NoDecode] = Field(
        default=(), description="Extra Kafka client options as a JSON object, e.g. {\"security.protocol\": \"SSL\"}, "
        "for every Kafka client lakemv makes.",
    )
    sinks: Annotated[tuple[tuple[str, tuple[str, ...]], ...], NoDecode] = Field(
        default=(), description="Data products besides the views' `@sink` headers, as JSON: "
        "{\"user_profile\": [\"kafka\", \"delta\"]} (lakemv.spark.sinks.products).",
    )
    product_topic_prefix: str = Field(
        default="lakemv", pattern=r"^[A-Za-z0-9._-]+$", description="A view's Kafka data product is the topic <prefix>.<view>."
    )
    product_bootstrap: str | None = Field(default=None, description="Brokers of the data-product topics; default kafka_bootstrap.")
    product_partitions: int = Field(default=1, ge=1, description="Partitions of a data-product topic when lakemv creates it.")
    delta_dir: Path | None = Field(default=None, description="Folder of the Delta data products; default <warehouse>/delta.")
    stack_dir: Path = Field(default=Path(".stack"), description="Folder of the local CDC stack (`lakemv stack up`).")
    cluster_dir: Path = Field(default=Path(".cluster"), description="Folder of the local scale-out stack (`lakemv cluster up`).")
    jars_dir: Path = Field(default=PROJECT_ROOT / "jvm" / "lib", description="The jars Spark loads (Iceberg, Delta, JDBC drivers, Kafka); `make setup` fetches them.")
    jvm_class_archive: bool = Field(
        default=True, description="Start Spark's JVM from the class archive `make setup` builds (lakemv.spark.class_archive)."
    )
    jvm_options: str = Field(default="", description="Extra Java options for Spark's driver JVM.")
    executor_jvm_options: str = Field(default="", description="Extra Java options for the executors' JVMs on a cluster master.")
    spark_master: str = Field(
        default="local[*]", description="Spark's master: local[*] (the driver's own threads), or a cluster's "
        "(spark://host:7077 for a standalone cluster)."
    )
    driver_host: str | None = Field(
        default=None, description="On a cluster, the address executors reach the driver at (spark.driver.host)."
    )
    executor_memory: str = Field(default="1g", description="On a cluster, each executor's heap.")
    executor_cores: int | None = Field(default=None, ge=1, description="On a cluster, cores per executor (default: a worker's all).")
    driver_memory: str = Field(default="4g", description="Spark driver's heap (with a local master, the executors' too).")
    shuffle_partitions: int = Field(default=4, ge=1, description="Spark's shuffle partitions (spark.sql.shuffle.partitions).")
    spark_conf: tuple[tuple[str, str], ...] = Field(
        default=(),
        description="More Spark conf for the session, as a JSON object (LAKEMV_SPARK_CONF='{\"spark.sql.adaptive.enabled\": \"false\"}'), "
        "applied after lakemv's own.",
    )

    @field_validator("spark_conf", mode="before")
    @classmethod
    def _conf_pairs(cls, value: Any) -> Any:
        """A JSON object's pairs, in order (settings stay hashable)."""
        return tuple((str(k), str(v)) for k, v in value.items()) if isinstance(value, dict) else value

    @field_validator("spark_master")
    @classmethod
    def _spark_master(cls, value: str) -> str:
        """A master Spark can start with, checked before a JVM fails on it."""
        if not re.fullmatch(r"local(\[(\*|\d+)(,\d+)?\])?|(spark|k8s|mesos)://\S+|yarn", value.strip()):
            raise ValueError("expected local, local[N], local[*], spark://host:port, k8s://... or yarn")
        return value.strip()

    @field_validator("driver_memory", "executor_memory")
    @classmethod
    def _memory(cls, value: str) -> str:
        """A JVM heap size as Spark reads it: a number with an optional unit (512m, 4g)."""
        if not re.fullmatch(r"\d+[kmgt]?b?", value.strip(), re.IGNORECASE):
            raise ValueError("expected a size such as 512m or 4g")
        return value.strip()

    @field_validator("s3_endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is not None:
            parsed = urlparse(value.strip())
            if parsed.scheme not in ("http", "https") or not parsed.hostname:
                raise ValueError("expected the store's URL, http(s)://host[:port]")
            try:
                parsed.port  # noqa: B018
            except ValueError as exc:
                raise ValueError(f"not a usable URL: {exc}") from None
        return value

    @field_validator("catalog_uri")
    @classmethod
    def _catalog_uri(cls, value: str | None) -> str | None:
        """A URI whose port is not a number is refused here, not deep inside a catalog client."""
        if value:
            try:
                urlparse(value.strip()).port  # noqa: B018
            except ValueError as exc:
                raise ValueError(f"not a usable URI: {exc}") from None
        return value

    @field_validator("sources_dirs", mode="before")
    @classmethod
    def _path_list(cls, value: Any) -> Any:
        """What a user types for a list of folders: `a`, `a,b` or `["a", "b"]`."""
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    return json.loads(text)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"not a JSON list of paths ({exc.msg}); or give paths separated by commas") from None
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("kafka_options", mode="before")
    @classmethod
    def _options(cls, value: Any) -> Any:
        """A JSON object (or a mapping) of client options, kept as sorted pairs (settings are hashable)."""
        value = _json_object(value, "Kafka client options")
        if isinstance(value, dict):
            return tuple(sorted((str(k), str(v)) for k, v in value.items()))
        return value

    @field_validator("sinks", mode="before")
    @classmethod
    def _sinks(cls, value: Any) -> Any:
        """{view: [kinds]} or {view: "kafka,delta"} (JSON in the environment), kept as sorted pairs."""
        value = _json_object(value, "view -> sinks")
        if isinstance(value, dict):
            pairs = []
            for view, kinds in value.items():
                if not isinstance(kinds, str | list | tuple):
                    raise ValueError(f"view {view!r}: expected a list of sink kinds such as [\"kafka\", \"delta\"], got {kinds!r}")
                listed = [k.strip() for k in kinds.split(",")] if isinstance(kinds, str) else list(kinds)
                pairs.append((str(view), tuple(str(k).lower() for k in listed if str(k).strip())))
            return tuple(sorted(pairs))
        return value

    @property
    def delta_root(self) -> Location:
        """Where the Delta data products live."""
        return location(self.delta_dir.expanduser().resolve(), self.s3) if self.delta_dir else self.lake / "delta"

    @field_validator("warehouse", mode="before")
    @classmethod
    def _warehouse(cls, value: Any) -> str:
        """A folder (made absolute) or an S3 prefix, spelled s3://bucket/prefix whatever the scheme given."""
        text = str(value).strip()
        if not text:
            raise ValueError("the warehouse is empty: give a folder or s3://bucket/prefix")
        scheme = urlparse(text).scheme if "://" in text else ""
        if scheme in S3_SCHEMES:
            parsed = urlparse(text)
            if not parsed.netloc:
                raise ValueError("an S3 warehouse names its bucket: s3://bucket/prefix")
            key = parsed.path.strip("/")
            return f"s3://{parsed.netloc}/{key}" if key else f"s3://{parsed.netloc}"
        if scheme == "file":
            text = unquote(urlparse(text).path)
        elif scheme:
            raise ValueError(f"unsupported warehouse scheme {scheme!r}: give a folder or s3://bucket/prefix")
        return str(Path(text).expanduser().resolve())

    @classmethod
    def of_environment(cls, env: dict[str, str], **overrides: Any) -> LakeSettings:
        """The settings a process with environment `env` would read (its LAKEMV_* variables only, not
        this process's), with `overrides` on top: for tools that start lakemv with an environment."""
        given = {k[len("LAKEMV_") :].lower(): v for k, v in env.items() if k.startswith("LAKEMV_")}
        return cls(**{k: v for k, v in {**given, **overrides}.items() if k in cls.model_fields})

    @property
    def remote(self) -> bool:
        """Whether the lake is in an object store."""
        return is_remote(self.warehouse)

    @property
    def s3(self) -> S3Options:
        secret = self.s3_secret_access_key.get_secret_value() if self.s3_secret_access_key else None
        return S3Options(self.s3_endpoint, self.s3_access_key_id, secret, self.s3_region, self.s3_path_style)

    @property
    def lake(self) -> Location:
        """The warehouse as a Location (lakemv's own files go under it)."""
        return location(self.warehouse, self.s3)

    @property
    def local_root(self) -> Path:
        """The driver's own folder (see local_dir)."""
        if self.local_dir is not None:
            return self.local_dir.expanduser().resolve()
        return Path(".lakemv").resolve() if self.remote else Path(self.warehouse)

    @property
    def set_wise_bytes(self) -> int | None:
        """The landing bytes from which a batch is parsed by Spark (bulk_min_bytes), None for never."""
        if self.bulk_min_bytes is not None:
            return self.bulk_min_bytes
        return None if self.spark_master.startswith("local") else 32 << 20

    @property
    def view_dirs(self) -> tuple[Path, ...]:
        """Folders views are discovered in, in order."""
        return (self.views_dir,) if self.extra_views_dir is None else (self.views_dir, self.extra_views_dir)

    @property
    def warehouse_uri(self) -> str:
        """The warehouse as a URI Iceberg writes table locations under."""
        return self.warehouse if self.remote else Path(self.warehouse).as_uri()

    @property
    def catalog_url(self) -> str:
        """SQLAlchemy URL of the catalog database (the one pyiceberg uses)."""
        from sqlalchemy.engine import make_url  # imported here: commands that touch no catalog start faster
        from sqlalchemy.exc import ArgumentError

        if self.is_rest:
            raise ConfigError("the catalog is a REST catalog, not a database", "LAKEMV_CATALOG_URI")
        url = self.catalog_uri or f"sqlite:///{self.local_root / 'catalog.db'}"
        try:
            parsed = make_url(url)
            parsed.port  # noqa: B018 - a port that is not a number fails here, not deep in a catalog client
        except (ArgumentError, ValueError) as exc:
            raise ConfigError(f"cannot parse catalog URI {redact(url)!r}: {redact(str(exc))}", "LAKEMV_CATALOG_URI") from None
        backend = parsed.get_backend_name()
        if backend not in ("sqlite", "postgresql"):
            raise ConfigError(
                f"catalog URI scheme {backend!r} is not supported; use http(s)://host:port (a REST catalog), "
                "sqlite:///path or postgresql://...",
                "LAKEMV_CATALOG_URI",
            )
        if backend == "postgresql" and parsed.drivername == "postgresql":
            url = parsed.set(drivername="postgresql+psycopg2").render_as_string(hide_password=False)
        return url

    @property
    def is_rest(self) -> bool:
        """Whether the catalog is a REST catalog (LAKEMV_CATALOG_URI=http(s)://...)."""
        return bool(self.catalog_uri) and urlparse(self.catalog_uri.strip()).scheme in ("http", "https")

    @property
    def is_sqlite(self) -> bool:
        return not self.is_rest and self.catalog_url.startswith("sqlite")

    @property
    def checkpoint_root(self) -> Location:
        """Where streaming checkpoints live: inside the warehouse, next to the data they describe."""
        return self.lake / "_checkpoints"
