"""The SparkSession factory: lakemv's jars, the Iceberg catalog from LakeSettings, UTC everywhere."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from catalog.errors import ConfigError
from catalog.lake import bootstrap, spark_catalog_conf
from catalog.settings import LakeSettings

LOG4J = Path(__file__).with_name("log4j2.properties")


def _jars(settings: LakeSettings) -> str:
    jars = sorted(settings.jars_dir.glob("*.jar"))
    if not any(j.name.startswith("iceberg-spark-runtime") for j in jars):
        raise ConfigError("Iceberg jars are missing: run `make setup` (fetches them with Maven)", str(settings.jars_dir))
    return ",".join(str(j) for j in jars)


def base_conf(settings: LakeSettings) -> dict[str, str]:
    """Session-wide conf: jars, extensions, quiet UTC JVM, small shuffles for one machine."""
    java_opts = f"-Dlog4j2.configurationFile={LOG4J.as_uri()} -Duser.timezone=UTC"
    return {
        "spark.jars": _jars(settings),
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions,"
        "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
        "spark.driver.memory": settings.driver_memory,
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.ansi.enabled": "true",
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
    }


def get_spark(settings: LakeSettings) -> SparkSession:
    """Return the process's SparkSession, with the catalog of `settings` configured on it."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(settings.spark_master).appName("lakemv")
    for key, value in base_conf(settings).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    use_catalog(spark, settings)
    return spark


def use_catalog(spark: SparkSession, settings: LakeSettings) -> None:
    """(Re)define the Iceberg catalog `settings.catalog_name` on a running session."""
    bootstrap(settings)
    for key, value in spark_catalog_conf(settings).items():
        spark.conf.set(key, value)
