"""One settings object for the whole lake: warehouse, catalog, Spark sizing (env prefix LAKEMV_)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from catalog.errors import ConfigError

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def _json_object(value: Any, what: str) -> Any:
    """A setting given as JSON text in the environment, parsed; other values as they are."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value) if value.strip() else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"not a JSON object of {what} ({exc.msg})") from None


class LakeSettings(BaseSettings):
    """Settings with defaults that run the embedded stack: SQLite catalog + files under ./warehouse."""

    model_config = SettingsConfigDict(env_prefix="LAKEMV_", frozen=True, extra="forbid")

    warehouse: Path = Field(default=Path("warehouse"), description="Folder of the local Iceberg warehouse.")
    catalog_name: str = Field(default="lake", pattern=r"^[a-z][a-z0-9_]*$")
    catalog_uri: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the JDBC catalog database: sqlite:///path or "
        "postgresql://user:password@host:port/db. Default: sqlite under the warehouse.",
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
        "(spark.bulk) in one unit, instead of line by line in the driver in units of max_events_per_batch. "
        "Default: 32 MiB on a cluster; never with a local master, where the driver parses faster (README).",
    )
    max_line_chars: int = Field(
        default=4 << 20, ge=1024, description="A longer landing line is a dead letter, not parsed."
    )
    local_state: bool = Field(
        default=True,
        description="Keep the local indexed state (spark.state) next to the checkpoint: batches look rows up "
        "there instead of scanning the Iceberg tables.",
    )
    direct_writes: bool = Field(
        default=True, description="Commit a batch's small writes as Parquet files through Iceberg's API (appends, and "
        "position deletes of the rows they replace, whose places the local state keeps) instead of Spark MERGEs "
        "(spark.directwrite).",
    )
    view_workers: int = Field(
        default=4, ge=1, description="Views a batch maintains at once from the local state (each writes its own "
        "tables, so while one view's Spark job runs another plans or commits); 1 maintains them one by one.",
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
        "{\"user_profile\": [\"kafka\", \"delta\"]} (spark.sinks).",
    )
    product_topic_prefix: str = Field(
        default="lakemv", pattern=r"^[A-Za-z0-9._-]+$", description="A view's Kafka data product is the topic <prefix>.<view>."
    )
    product_bootstrap: str | None = Field(default=None, description="Brokers of the data-product topics; default kafka_bootstrap.")
    product_partitions: int = Field(default=1, ge=1, description="Partitions of a data-product topic when lakemv creates it.")
    delta_dir: Path | None = Field(default=None, description="Folder of the Delta data products; default <warehouse>/delta.")
    stack_dir: Path = Field(default=Path(".stack"), description="Folder of the local CDC stack (`lakemv stack up`).")
    jars_dir: Path = PROJECT_ROOT / "jvm" / "lib"
    jvm_class_archive: bool = Field(
        default=True, description="Start Spark's JVM from the class archive `make setup` builds (spark.class_archive)."
    )
    jvm_options: str = Field(default="", description="Extra Java options for Spark's driver JVM.")
    spark_master: str = "local[*]"
    driver_memory: str = "4g"
    shuffle_partitions: int = Field(default=4, ge=1)

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
                listed = [k.strip() for k in kinds.split(",")] if isinstance(kinds, str) else list(kinds)
                pairs.append((str(view), tuple(str(k).lower() for k in listed if str(k).strip())))
            return tuple(sorted(pairs))
        return value

    @property
    def delta_root(self) -> Path:
        """Where the Delta data products live."""
        return (self.delta_dir or self.warehouse / "delta").expanduser().resolve()

    @field_validator("warehouse")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        return value.expanduser().resolve()

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
        return self.warehouse.as_uri()

    @property
    def catalog_url(self) -> str:
        """SQLAlchemy URL of the catalog database (the one pyiceberg uses)."""
        from sqlalchemy.engine import make_url  # imported here: commands that touch no catalog start faster
        from sqlalchemy.exc import ArgumentError

        url = self.catalog_uri or f"sqlite:///{self.warehouse / 'catalog.db'}"
        try:
            parsed = make_url(url)
        except ArgumentError as exc:
            raise ConfigError(f"cannot parse catalog URI {url!r}: {exc}", "LAKEMV_CATALOG_URI") from None
        backend = parsed.get_backend_name()
        if backend not in ("sqlite", "postgresql"):
            raise ConfigError(
                f"catalog URI scheme {backend!r} is not supported; use sqlite:///path or postgresql://...",
                "LAKEMV_CATALOG_URI",
            )
        if backend == "postgresql" and parsed.drivername == "postgresql":
            url = parsed.set(drivername="postgresql+psycopg2").render_as_string(hide_password=False)
        return url

    @property
    def is_sqlite(self) -> bool:
        return self.catalog_url.startswith("sqlite")

    @property
    def checkpoint_root(self) -> Path:
        """Where streaming checkpoints live: inside the warehouse, next to the data they describe."""
        return self.warehouse / "_checkpoints"
