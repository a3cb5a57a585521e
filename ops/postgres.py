"""The stack's PostgreSQL: the Debian server run as `postgres` on a loopback port, its database with a
table per declared source, and the replication slot Debezium reads from. `Stack` holds these methods;
they use its config, folder and service helpers."""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from lakemv.catalog.declarations import SourceTable
from lakemv.core.errors import ConfigError
from lakemv.core.runtime import lifecycle
from lakemv.ops.services import StackError, alive

USER = "lake"  # the stack's database role


class PostgresServer:
    """PostgreSQL for the local stack (mixed into `lakemv.ops.stack.Stack`)."""

    def _pg_bin(self) -> Path:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name))
        if not found:
            raise ConfigError("PostgreSQL server binaries missing (Debian package postgresql): run `make setup`")
        return Path(found[-1])

    def _as_postgres(self) -> list[str]:
        return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _pg(self, tool: str, *args: str) -> subprocess.CompletedProcess:
        if os.geteuid() == 0 and self.postgres_home.parent.exists():
            self._reach(self.postgres_home)  # again: a chmod of a folder above may have masked its ACL since
        command = [*self._as_postgres(), str(self._pg_bin() / tool), *args]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise StackError(f"{tool} failed: {(done.stderr or done.stdout).strip()}")
        return done

    @property
    def postgres_home(self) -> Path:
        """PostgreSQL's files, in the stack's folder like everything else the stack runs."""
        return self.folder / "postgres"

    def _let_postgres_in(self, home: Path) -> None:
        """As root, the server runs as `postgres`, who may not pass a folder above the stack's (/root,
        pytest's 0700 temp dirs): each such folder gets an ACL entry letting postgres through (execute
        only, nothing listed or read). An earlier version kept the data under the temp dir: it moves."""
        self._reach(home)
        digest = hashlib.sha1(str(self.folder).encode()).hexdigest()[:12]
        earlier = Path(tempfile.gettempdir()) / f"lakemv-postgres-{digest}"
        if earlier.is_dir() and not home.exists():
            shutil.move(str(earlier), str(home))

    def _reach(self, home: Path) -> None:
        """Let `postgres` pass every folder above `home` (an ACL entry; `setfacl -m` also restores the
        ACL's mask, which a later `chmod go-rwx` of the folder - pytest does that to its temp root when
        another worker starts - sets to nothing, locking postgres out of a running server's data)."""
        for parent in reversed(home.parents):
            if subprocess.run(["runuser", "-u", "postgres", "--", "test", "-x", str(parent)], capture_output=True).returncode:
                done = subprocess.run(["setfacl", "-m", "u:postgres:x", str(parent)], capture_output=True, text=True)
                if done.returncode:
                    raise StackError(f"PostgreSQL's user cannot reach {home}: setfacl failed ({done.stderr.strip()}); use a --dir it can reach")

    def _start_postgres(self) -> None:
        home = self.postgres_home
        if os.geteuid() == 0:
            home.parent.mkdir(parents=True, exist_ok=True)
            self._let_postgres_in(home)
        data, run_dir = home / "data", home / "run"
        if not (data / "PG_VERSION").exists():
            data.mkdir(parents=True, exist_ok=True)
            if os.geteuid() == 0:
                for path in (home, data):
                    shutil.chown(path, "postgres", "postgres")
            os.chmod(data, 0o700)
            self._pg("initdb", "-D", str(data), "-A", "trust", "-U", USER, "-E", "UTF8")
            with open(data / "postgresql.conf", "a") as conf:
                conf.write(
                    "\n# lakemv stack: logical decoding for Debezium, loopback only\n"
                    "wal_level = logical\nmax_wal_senders = 10\nmax_replication_slots = 10\n"
                    "listen_addresses = '127.0.0.1'\nfsync = off\nsynchronous_commit = off\n"
                )
        run_dir.mkdir(exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(run_dir, "postgres", "postgres")
        if self._postgres_pid() is None:
            lifecycle.outlive_me()
            self._pg("pg_ctl", "-D", str(data), "-w", "-t", "60", "-l", str(home / "postgres.log"),
                     "-o", f"-p {self.config.postgres_port} -k {run_dir}", "start")  # fmt: skip
        self._create_database()

    def _postgres_pid(self) -> int | None:
        try:
            pid = int((self.postgres_home / "data" / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if alive(pid) else None

    def _connect(self, database: str | None = None):  # noqa: ANN202 - a psycopg2 connection
        import psycopg2

        return psycopg2.connect(
            host="127.0.0.1", port=self.config.postgres_port, user=USER, dbname=database or self.config.database
        )

    def _create_database(self) -> None:
        import psycopg2

        con = psycopg2.connect(host="127.0.0.1", port=self.config.postgres_port, user=USER, dbname="postgres")
        con.autocommit = True
        try:
            with con.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.config.database,))
                if cur.fetchone() is None:
                    cur.execute(f'CREATE DATABASE "{self.config.database}"')
        finally:
            con.close()

    def create_tables(self, sources: Mapping[str, SourceTable]) -> list[str]:
        """Create a table per declared source that PostgreSQL lacks; the names of those created."""
        from lakemv.workload.postgres import SIGNAL_TABLE_SQL, create_table_sql

        created = []
        con = self._connect()
        with con, con.cursor() as cur:
            cur.execute(SIGNAL_TABLE_SQL)
            for name, source in sorted(sources.items()):
                cur.execute("SELECT to_regclass(%s)", (f"public.{name}",))
                if cur.fetchone()[0] is None:
                    cur.execute(create_table_sql(source))
                    created.append(name)
        con.close()
        return created

    def drop_slot(self, wait_s: float = 15.0) -> bool:
        """Drop Debezium's replication slot (a slot nobody reads keeps every WAL segment).

        Called once Connect is stopped; its walsender may not have noticed the closed connection yet
        and still hold the slot, so that backend is ended and the drop waits for the slot to be free."""
        if self._postgres_pid() is None:
            return False
        con = self._connect()
        con.autocommit = True
        deadline = time.monotonic() + wait_s
        try:
            with con.cursor() as cur:
                while True:
                    cur.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'lakemv'")
                    row = cur.fetchone()
                    if row is None:
                        return False
                    if row[0] is None:
                        cur.execute("SELECT pg_drop_replication_slot('lakemv')")
                        return True
                    if time.monotonic() > deadline:
                        raise StackError(f"replication slot lakemv is still held by backend {row[0]} after {wait_s:.0f}s")
                    cur.execute("SELECT pg_terminate_backend(%s)", (row[0],))
                    time.sleep(0.2)
        finally:
            con.close()
