"""The GitHub workload as SQL against a real PostgreSQL: what Debezium then captures.

`GitHubWorkload` decides what happens (same operations, same skew); here each change is a statement
instead of an envelope: inserts, updates of join columns, deletes, primary-key updates (an e-mail
change, a repository rename: Debezium sends delete + tombstone + create), grouped into transactions
that span tables. Its `state` stays the model of the database's contents; the tests take PostgreSQL's
own answer as the oracle.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from lakemv.catalog.declarations import Column, SourceTable
from lakemv.core.sql.quote import ansi_ident
from lakemv.core.types import postgres_type as type_in_postgres
from lakemv.workload.github import GitHubWorkload, Row, WorkloadConfig

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
Statement = tuple[str, tuple[Any, ...]]


def postgres_type(column: Column) -> str:
    """The PostgreSQL type whose Debezium encoding is what the declaration expects."""
    if column.type == "decimal":
        return f"numeric({column.precision},{column.scale})"
    return type_in_postgres(column.type, column.wire_encoding)



# Debezium's signal table (signal.data.collection): a row `execute-snapshot` starts an incremental
# snapshot of the tables it names while changes keep streaming.
SIGNAL_TABLE = "debezium_signal"
SIGNAL_TABLE_SQL = f"CREATE TABLE IF NOT EXISTS public.{SIGNAL_TABLE} (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048))"


def create_table_sql(source: SourceTable) -> str:
    """CREATE TABLE for a declared source: its columns, primary key and unique keys."""
    columns = [f"{ansi_ident(c.name)} {postgres_type(c)}{' NOT NULL' if c.name in source.primary_key else ''}" for c in source.columns]
    columns.append(f"PRIMARY KEY ({', '.join(ansi_ident(k) for k in source.primary_key)})")
    columns += [f"UNIQUE ({', '.join(ansi_ident(c) for c in unique)})" for unique in source.unique]
    return f"CREATE TABLE public.{ansi_ident(source.name)} (\n  " + ",\n  ".join(columns) + "\n)"


def to_postgres(column: Column, value: Any) -> Any:
    """A model value (timestamps as epoch micros, dates as days) as psycopg2 sends it."""
    if value is None:
        return None
    if column.type == "timestamp":
        moment = _EPOCH + timedelta(microseconds=value)
        return moment if column.wire_encoding == "iso" else moment.replace(tzinfo=None)
    if column.type == "date":
        return (_EPOCH + timedelta(days=value)).date()
    return value


class PostgresWorkload(GitHubWorkload):
    """GitHub activity as SQL statements, grouped into transactions of 1 to `max_ops` operations."""

    def __init__(self, config: WorkloadConfig, sources: Mapping[str, SourceTable], max_ops: int = 4):
        super().__init__(replace(config, noise=0.0), sources)  # a database neither repeats nor replays
        self.max_ops = max_ops
        self.statements: list[Statement] = []

    # ---- what GitHubWorkload does, as statements -------------------------------------------------
    def _emit(self, table: str, op: str, before: Row | None, after: Row | None, snapshot: bool = False) -> None:
        source = self.sources[table]
        key = source.primary_key
        if op in ("c", "r"):
            assert after is not None
            names = ", ".join(ansi_ident(c.name) for c in source.columns)
            marks = ", ".join(["%s"] * len(source.columns))
            values = tuple(to_postgres(c, after[c.name]) for c in source.columns)
            self.statements.append((f"INSERT INTO public.{ansi_ident(table)} ({names}) VALUES ({marks})", values))
        elif op == "u":
            assert after is not None
            others = [c for c in source.columns if c.name not in key]
            sets = ", ".join(f"{ansi_ident(c.name)} = %s" for c in others)
            where = " AND ".join(f"{ansi_ident(k)} = %s" for k in key)
            values = tuple(to_postgres(c, after[c.name]) for c in others) + tuple(after[k] for k in key)
            self.statements.append((f"UPDATE public.{ansi_ident(table)} SET {sets} WHERE {where}", values))
        else:
            assert before is not None
            where = " AND ".join(f"{ansi_ident(k)} = %s" for k in key)
            self.statements.append((f"DELETE FROM public.{ansi_ident(table)} WHERE {where}", tuple(before[k] for k in key)))

    def _change_key(self, table: str, row: Row, changes: Row) -> None:
        """UPDATE of primary-key columns: one statement, which Debezium turns into delete + create."""
        source = self.sources[table]
        old_key, new = self._key(table, row), {**row, **changes}
        del self.state[table][old_key]
        self.state[table][self._key(table, new)] = new
        self.order[table].append(self._key(table, new))
        sets = ", ".join(f"{ansi_ident(c)} = %s" for c in changes)
        where = " AND ".join(f"{ansi_ident(k)} = %s" for k in source.primary_key)
        self.statements.append((f"UPDATE public.{ansi_ident(table)} SET {sets} WHERE {where}", (*changes.values(), *old_key)))

    def _operate(self, name: str) -> None:
        if name == "user_email_change":
            user = self._pick("users", 3.0)
            if user is not None:
                return self._change_key("users", user, {"email": f"moved{self._next()}@example.org"})
        if name == "repo_rename":
            repo = self._pick("repos", 3.0)
            if repo is not None:
                return self._change_key("repos", repo, {"name": f"{repo['name'].split('~')[0]}~{self._next()}"})
        return super()._operate(name)

    # ---- transactions ---------------------------------------------------------------------------
    def snapshot(self) -> list[list[Statement]]:
        """The initial contents, as one transaction."""
        self.statements = []
        self._snapshot()
        return [self.statements]

    def transactions(self, changes: int) -> Iterator[list[Statement]]:
        """`changes` random operations (the workload's weights), in transactions of 1..max_ops."""
        from lakemv.workload.github import OPERATIONS

        weights, names = [w for w, _ in OPERATIONS], [n for _, n in OPERATIONS]
        done = 0
        while done < changes:
            size = min(self.rng.randint(1, self.max_ops), changes - done)
            self.statements = []
            for name in self.rng.choices(names, weights, k=size):
                self._operate(name)
            done += size
            if self.statements:
                yield self.statements


def apply(con, transactions: Iterator[list[Statement]] | list[list[Statement]]) -> int:  # noqa: ANN001 - psycopg2
    """Run each transaction (a list of statements) as one PostgreSQL transaction; statements run."""
    count = 0
    for statements in transactions:
        with con, con.cursor() as cur:
            for sql, values in statements:
                cur.execute(sql, values)
                count += 1
    return count


def load_state(con, workload: PostgresWorkload) -> None:  # noqa: ANN001 - psycopg2
    """Make `workload`'s model the database's current contents (to go on changing an existing
    database); its serial numbers continue after the largest one in use."""
    import re

    largest = 0
    with con.cursor() as cur:
        for table, source in workload.sources.items():
            names = [c.name for c in source.columns]
            cur.execute(f"SELECT {', '.join(ansi_ident(n) for n in names)} FROM public.{ansi_ident(table)}")
            for values in cur.fetchall():
                row = {c.name: _from_postgres(c, v) for c, v in zip(source.columns, values, strict=True)}
                key = workload._key(table, row)
                workload.state[table][key] = row
                workload.order[table].append(key)
                for value in row.values():
                    for digits in re.findall(r"(?<!\d)\d{7,15}(?!\d)", str(value)):  # a serial, not a run of digits in long text
                        largest = max(largest, int(digits))
    workload.serial = max(workload.serial, largest)


def _from_postgres(column: Column, value: Any) -> Any:
    if value is None:
        return None
    if column.type == "timestamp":
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return (moment - _EPOCH) // timedelta(microseconds=1)
    if column.type == "date":
        return (value - _EPOCH.date()).days
    return value
