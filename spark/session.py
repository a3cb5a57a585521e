"""The SparkSession factory: lakemv's jars, the Iceberg catalog from LakeSettings, UTC everywhere.

The JVM runs in a session of its own (see `lakemv.core.runtime.lifecycle`): a Ctrl-C or a supervisor's SIGTERM to
lakemv's process group reaches the Python driver only, which cancels running jobs and then closes
the JVM's stdin, on which Spark's gateway exits. Its stderr passes through a filter that drops the
start-up banner, so a command's own output (and its one `error:` line) is all a user sees.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import py4j
from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from lakemv.catalog.lake import bootstrap, hadoop_s3_conf, spark_catalog_conf
from lakemv.catalog.settings import LakeSettings
from lakemv.core.errors import ConfigError
from lakemv.core.runtime import lifecycle

LOG4J = Path(__file__).with_name("log4j2.properties")

# What the JVM prints at start-up whatever the log configuration: not for the user's terminal.
BANNER = (
    b"WARNING: Using incubator modules",
    b'Setting default log level to "',
    b"To adjust logging level use sc.setLogLevel",
)
# PySpark logs every analysis error a second time, as a JSON line with the query context: the
# error itself reaches the caller, which reports it once.
QUERY_CONTEXT_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")
PY4J = str(Path(py4j.__file__).parent)


def _not_py4j(record: logging.LogRecord) -> bool:
    """Drop what py4j logs on the root logger. It logs a network error there with its traceback
    before raising it; the raise reaches lakemv, which reports it. At exit it is pure noise: a
    Java object's finalizer asks the JVM to free it just as the JVM exits (seen once in a
    fresh-clone run: `lakemv explain` with a bad view printed its one error line, then a py4j
    ConnectionResetError traceback)."""
    return not record.pathname.startswith(PY4J)


def quiet_py4j() -> None:
    root = logging.getLogger()
    if _not_py4j not in root.filters:
        root.addFilter(_not_py4j)


def _jars(settings: LakeSettings) -> dict[str, str]:
    """Where the jars go. On a local master the executors run in the driver's JVM, so the jars go on
    that JVM's class path: `spark.jars` would copy all of them (80 MB) into a `spark-*/userFiles`
    folder under the temp dir for every session, which a killed JVM never removes (1,534 of them,
    55 GB, filled the disk after a day of crash tests). On a cluster `spark.jars` ships them."""
    jars = sorted(settings.jars_dir.glob("*.jar"))
    if not any(j.name.startswith("iceberg-spark-runtime") for j in jars):
        raise ConfigError("Iceberg jars are missing: run `make setup` (fetches them with Maven)", str(settings.jars_dir))
    if settings.spark_master.startswith("local"):
        return {"spark.driver.extraClassPath": os.pathsep.join(str(j) for j in jars)}
    # The driver's JVM starts before Spark reads spark.jars: the class path is what the catalog, the
    # s3a file system and Delta's log store are loaded from on the driver. The executors fetch them.
    return {"spark.driver.extraClassPath": os.pathsep.join(str(j) for j in jars), "spark.jars": ",".join(str(j) for j in jars)}


def _local_files(settings: LakeSettings) -> dict[str, str]:
    """Hadoop's local file system without a `chmod` process per file it creates (jvm/java,
    dev.lakemv.hadoop): six per Iceberg commit without Hadoop's native library, which PySpark lacks.
    On a local master only: there the driver's class path holds lakemv's jar before Hadoop loads a
    file system (on a cluster the warehouse is in an object store)."""
    if not settings.spark_master.startswith("local") or not (settings.jars_dir / "lakemv-jvm.jar").is_file():
        return {}
    return {"spark.hadoop.fs.file.impl": "dev.lakemv.hadoop.LocalFileSystem",
            "spark.hadoop.fs.AbstractFileSystem.file.impl": "dev.lakemv.hadoop.LocalFs"}  # fmt: skip


def _cluster(settings: LakeSettings) -> dict[str, str]:
    """What a cluster master needs besides the jars: where executors reach the driver, their size."""
    if settings.spark_master.startswith("local"):
        return {}
    conf = {"spark.executor.memory": settings.executor_memory}
    if settings.executor_cores:
        conf["spark.executor.cores"] = str(settings.executor_cores)
    if settings.driver_host:
        conf["spark.driver.host"] = settings.driver_host
        conf["spark.driver.bindAddress"] = settings.driver_host
    return conf


def base_conf(settings: LakeSettings) -> dict[str, str]:
    """Session-wide conf: jars, extensions, quiet UTC JVM, small shuffles for one machine; then the
    user's own (`spark_conf`)."""
    from lakemv.spark.class_archive import java_options

    java_opts = f"-Dlog4j2.configurationFile={LOG4J.as_uri()} -Duser.timezone=UTC"
    driver_opts = " ".join(o for o in (java_opts, java_options(settings), settings.jvm_options) if o)
    return {
        **_jars(settings),
        **_cluster(settings),
        **_local_files(settings),
        **hadoop_s3_conf(settings),
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions,"
        "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": driver_opts,
        "spark.executor.extraJavaOptions": " ".join(o for o in (java_opts, settings.executor_jvm_options) if o),
        "spark.driver.memory": settings.driver_memory,
        # The local state loads a table by collecting its rows to the driver (lakemv.spark.batch.sync):
        # at 1M users, a mirror with the key columns of 100 views' shapes is more than Spark's default
        # 1 GiB of results ("Total size of serialized results ... is bigger than
        # spark.driver.maxResultSize"). The driver's heap is the bound that matters.
        "spark.driver.maxResultSize": settings.driver_memory,
        # A task's result larger than this goes to the driver through the block manager, which can
        # lose it under memory pressure: building 100 views at 1M users failed with "TaskResultLost
        # (result lost from block manager)" in a collect. Up to the RPC message size (128 MiB) it is
        # handed over with the task's status (in process, in local mode).
        "spark.task.maxDirectResultSize": "128m",
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        # Compiled query code is cached per plan; Spark keeps 100. A batch of 16 views needs more
        # than that, so each batch compiled them all again (a 16-view batch: 5.5 -> 5.0 s with more).
        "spark.sql.codegen.cache.maxEntries": "4096",
        # Spark sizes its memory pages from the heap (64 MiB here) and every hash relation, sort or
        # aggregation takes a whole page however few rows it holds. A batch of 100 views' small
        # queries filled the 4 GiB heap with them: 122 full collections in three batches, 34-51 s a
        # batch; with 2 MiB pages none, 23-27 s. A larger record still gets a page its size.
        "spark.buffer.pageSize": "2m",
        "spark.ui.enabled": "false",
        # With the UI off, Spark (before SPARK-55353) still keeps the last 1,000 SQL executions' plans
        # and metrics on the driver's heap, read by nobody here; a 100-view batch's plans are large.
        # (What filled the 4 GB heap after building 100 views at 1M users was local checkpoints, not
        # these: `lakemv.spark.materialise`; docs/performance.md.)
        "spark.sql.ui.retainedExecutions": "50",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.ansi.enabled": "true",
        # The landing glob (<landing>/*/*) resolves to every file; past 32 paths Spark lists them
        # with a Spark job of one task per path, on every trigger: ~1.1 s for 315 files here, 0.07 s
        # listed on the driver. Landing folders are listed by the driver.
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000",
        # A stopping stream does not wait for its batch: the Python side has abandoned it, and the
        # next run replays it (exactly once, by the journal and write ids).
        "spark.sql.streaming.stopTimeout": "5000",
        **dict(settings.spark_conf),
    }


# Conf keys whose values are credentials (the S3 secret, a catalog's password; Spark's own redaction
# pattern is alike): `spark-submit` would show them to every local user in `ps`.
_SECRET_KEY = re.compile(r"(?i)secret|password|token|credential")


def is_secret_key(key: str) -> bool:
    return _SECRET_KEY.search(key) is not None


def _forward_stderr(stream, log: Path) -> None:  # noqa: ANN001 - the JVM's stderr pipe
    """The JVM's own log lines go to `log`, not the terminal: a failure reaches the user once, as
    lakemv's one `error:` line (LAKEMV_DEBUG=1 shows them on stderr too)."""
    debug = bool(os.environ.get("LAKEMV_DEBUG"))
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        sink = log.open("ab")
    except OSError:
        sink = None
    for line in iter(stream.readline, b""):
        if line.startswith(BANNER) or lifecycle.stopping():  # a JVM told to stop logs what it aborts
            continue
        try:
            if sink is not None:
                sink.write(line)
                sink.flush()
            if debug or sink is None:
                sys.stderr.write(line.decode("utf-8", "replace"))
                sys.stderr.flush()
        except (OSError, ValueError):
            pass


def _launch_jvm(conf: SparkConf, log: Path) -> None:
    """Start Spark's JVM gateway in a session of its own, its banner filtered, its log lines in `log`,
    stopped with lakemv."""
    gateway = launch_gateway(conf, popen_kwargs={"start_new_session": True, "stderr": subprocess.PIPE})
    SparkContext._ensure_initialized(gateway=gateway)
    process = gateway.proc
    threading.Thread(target=_forward_stderr, args=(process.stderr, log), name="spark-stderr", daemon=True).start()
    lifecycle.adopt("spark", process)
    quiet_py4j()
    lifecycle.on_stop(_cancel_jobs)
    atexit.register(_stop_session_at_exit)  # runs before lifecycle's exit handler closes the JVM


def _stop_session_at_exit() -> None:
    """An orderly stop (PySpark's own threads then see no broken pipe) unless a stop request
    abandoned the JVM: calls into it from a stopping process may block."""
    session = SparkSession._instantiatedSession
    if session is not None and not lifecycle.stopping():
        _stop_session(session)


def _stop_session(session: SparkSession) -> None:
    """Stop a session, its accumulator handler told first: stopping the context closes the JVM's end
    of PySpark's accumulator socket, and a handler that reads that EOF before it learns of the stop
    prints an EOFError traceback (seen under load, on `lakemv explain`). Nothing more is accumulated
    at a stop."""
    server = getattr(SparkContext._active_spark_context, "_accumulatorServer", None)
    if server is not None:
        server.server_shutdown = True
        server.handle_error = lambda request, client_address: None
    session.stop()


def _quiet_accumulator_server() -> None:
    """PySpark's accumulator server prints a traceback when the JVM's end of its socket closes under
    it: at every stop that is not an orderly session stop, such as a second SIGTERM's immediate exit
    (seen in CI: `serve` stopped by a supervisor, whose flow run got SIGTERM from it and from Prefect's
    runner). Nothing it could report is a user's concern: the stop is reported once, by lakemv."""
    server = getattr(SparkContext._active_spark_context, "_accumulatorServer", None)
    if server is not None:
        server.handle_error = lambda request, client_address: None


def _cancel_jobs() -> None:
    context = SparkContext._active_spark_context
    if context is not None:
        context.cancelAllJobs()


_warming: threading.Thread | None = None


def warm_up(settings: LakeSettings) -> None:
    """Start the session in the background (the JVM boots while the caller does other start-up
    work); `get_spark` waits for it. An error here is raised again by that `get_spark`."""
    global _warming
    if _warming is None and SparkContext._active_spark_context is None:
        _warming = threading.Thread(target=_quietly, args=(settings,), name="spark-warm-up", daemon=True)
        _warming.start()


def _quietly(settings: LakeSettings) -> None:
    try:
        _session(settings)
    except Exception:  # noqa: BLE001 - reported by the caller's own get_spark
        pass


def get_spark(settings: LakeSettings) -> SparkSession:
    """Return the process's SparkSession, with the catalog of `settings` configured on it."""
    if _warming is not None and _warming is not threading.current_thread():
        _warming.join()
    return _session(settings)


def _session(settings: LakeSettings) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = {"spark.master": settings.spark_master, "spark.app.name": "lakemv", **base_conf(settings)}
    with SparkContext._lock:
        if SparkContext._gateway is None:  # secrets reach the JVM through its gateway below, never its command line
            public = SparkConf(loadDefaults=False).setAll([(k, v) for k, v in conf.items() if not is_secret_key(k)])
            _launch_jvm(public, settings.local_root / "_lakemv" / "jvm.log")
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    _quiet_accumulator_server()
    spark.sparkContext.setLogLevel("ERROR")
    for name in QUERY_CONTEXT_LOGGERS:
        logging.getLogger(name).disabled = True
    lifecycle.reassert()  # PySpark's context replaced the SIGINT handler with its own
    use_catalog(spark, settings)
    return spark


def stop_spark() -> None:
    """Stop the session and its JVM, if one runs; a later `get_spark` starts afresh."""
    global _warming
    if _warming is not None:
        _warming.join()
        _warming = None
    active = SparkSession.getActiveSession() or SparkSession._instantiatedSession
    if active is not None:
        _stop_session(active)
    with SparkContext._lock:
        if SparkContext._gateway is not None:
            SparkContext._gateway.shutdown()
            SparkContext._gateway = None
            SparkContext._jvm = None
    lifecycle.stop_child("spark")


def use_catalog(spark: SparkSession, settings: LakeSettings) -> None:
    """(Re)define the Iceberg catalog `settings.catalog_name` on a running session."""
    bootstrap(settings)
    for key, value in {**spark_catalog_conf(settings), **hadoop_s3_conf(settings)}.items():
        spark.conf.set(key, value)
