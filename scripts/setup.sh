#!/usr/bin/env bash
# Idempotent setup of everything lakemv needs on a fresh Debian machine:
#   1. Debian packages (Java 17, Maven, PostgreSQL for the catalog tests, Chromium for the UI's test) when missing;
#   2. the virtualenv .venv with the pinned Python packages (pyproject.toml + constraints.txt);
#   3. the JVM jars declared in jvm/pom.xml, fetched by Maven into jvm/lib, and those of the local CDC
#      stack (Kafka, Kafka Connect, Debezium: jvm/stack/pom.xml) into jvm/stack/lib, and those of the
#      scale-out servers (an S3 object store, Iceberg's REST catalog: jvm/scaleout/pom.xml) into
#      jvm/scaleout/lib;
#   4. lakemv's own JVM classes (jvm/java), compiled against PySpark's jars and Iceberg into jvm/lib/lakemv-jvm.jar;
#   5. the class archive Spark's JVM starts from (jvm/cds, ops/class_archive.py);
#   6. an empty Prefect database, migrated, that `serve` copies for a new lake (flows/prefectdb.py).
# Re-running it does nothing unless one of those inputs changed.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .setup

say() { printf '\033[1msetup:\033[0m %s\n' "$*"; }

# ---- 1. Debian packages -------------------------------------------------------------------------
missing=()
command -v javac >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)  # javac: lakemv's own classes (jvm/java)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
command -v setfacl >/dev/null 2>&1 || missing+=(acl)  # the local stack lets PostgreSQL's user into its folder (ops/stack.py)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)  # the Prefect UI's browser test (tests/e2e/test_prefect_ui.py)
if ((${#missing[@]})); then
  say "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# ---- 2. Python ----------------------------------------------------------------------------------
PYTHON="${PYTHON:-python3}"
"$PYTHON" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] < (3, 13) else 1)' || {
  echo "setup: lakemv needs Python 3.11 or 3.12 (found $("$PYTHON" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
  exit 1
}
[ -x .venv/bin/python ] || { say "creating .venv"; "$PYTHON" -m venv .venv; }
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
if [ "$(cat .setup/python 2>/dev/null)" != "$want" ]; then
  say "installing Python packages (pinned by constraints.txt)"
  .venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[test,bench,docs]'
  echo "$want" > .setup/python
fi

# ---- 3. JVM jars --------------------------------------------------------------------------------
want=$(sha256sum jvm/pom.xml | cut -c1-16)
if [ "$(cat .setup/jars 2>/dev/null)" != "$want" ] || ! compgen -G "jvm/lib/iceberg-spark-runtime-*.jar" >/dev/null; then
  say "fetching JVM jars with Maven (jvm/pom.xml)"
  rm -rf jvm/lib
  (cd jvm && mvn -q -B -s settings.xml dependency:copy-dependencies -DoutputDirectory=lib -DexcludeTransitive=true)
  echo "$want" > .setup/jars
fi
want=$(cat jvm/stack/pom.xml jvm/settings.xml | sha256sum | cut -c1-16)
if [ "$(cat .setup/stack-jars 2>/dev/null)" != "$want" ] || ! compgen -G "jvm/stack/lib/debezium-connector-postgres-*.jar" >/dev/null; then
  say "fetching the CDC stack's jars with Maven (jvm/stack/pom.xml: Kafka, Kafka Connect, Debezium)"
  rm -rf jvm/stack/lib
  (cd jvm/stack && mvn -q -B -s ../settings.xml dependency:copy-dependencies -DoutputDirectory=lib)
  echo "$want" > .setup/stack-jars
fi
want=$(cat jvm/scaleout/pom.xml jvm/settings.xml | sha256sum | cut -c1-16)
if [ "$(cat .setup/scaleout-jars 2>/dev/null)" != "$want" ] || ! compgen -G "jvm/scaleout/lib/rest/iceberg-open-api-*.jar" >/dev/null; then
  say "fetching the scale-out servers' jars with Maven (jvm/scaleout/pom.xml: s3proxy, Iceberg's REST catalog)"
  rm -rf jvm/scaleout/lib
  (cd jvm/scaleout && mvn -q -B -s ../settings.xml dependency:copy-dependencies -DoutputDirectory=lib/s3proxy -DincludeArtifactIds=s3proxy \
     && mvn -q -B -s ../settings.xml dependency:copy-dependencies -DoutputDirectory=lib/rest -DexcludeArtifactIds=s3proxy)
  echo "$want" > .setup/scaleout-jars
fi
# ---- 4. lakemv's own JVM classes -------------------------------------------------------------------
want=$(find jvm/java -name '*.java' | sort | xargs cat | sha256sum | cut -c1-16)
if [ "$(cat .setup/jvm-classes 2>/dev/null)" != "$want" ] || [ ! -f jvm/lib/lakemv-jvm.jar ]; then
  say "compiling lakemv's JVM classes (jvm/java)"
  spark_jars=$(.venv/bin/python -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
  iceberg=$(ls jvm/lib/iceberg-spark-runtime-*.jar)
  build=$(mktemp -d)
  javac --release 17 -nowarn -cp "$spark_jars/*:$iceberg" -d "$build" $(find jvm/java -name '*.java')
  jar cf jvm/lib/lakemv-jvm.jar -C "$build" .
  rm -rf "$build"
  echo "$want" > .setup/jvm-classes
fi
# ---- 5. Class archive ---------------------------------------------------------------------------
# Built for the current java, PySpark and jars (a no-op when it exists); Spark starts seconds sooner.
.venv/bin/python -m lakemv.ops.class_archive --quiet-if-present
# ---- 6. Prefect database template ---------------------------------------------------------------
# An empty Prefect database migrated once (flows/prefectdb.py): `serve` on a new lake starts ~20 s sooner.
.venv/bin/python -m lakemv.flows.prefectdb --quiet-if-present
say "ready"
