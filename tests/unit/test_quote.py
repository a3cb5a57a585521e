"""The one quoting helper (lakemv.core.sql.quote) reads back as the text it quoted, in every dialect
lakemv writes: Spark for the engine, DuckDB for queries and verify, PostgreSQL and SQLite beside them."""

from __future__ import annotations

import sqlglot
from hypothesis import given
from hypothesis import strategies as st
from sqlglot import exp

from lakemv.core.sql.quote import ansi_ident, ansi_string, q, spark_string

TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=20)


def _read(sql: str, dialect: str) -> tuple[str, str]:
    select = sqlglot.parse_one(sql, read=dialect)
    column, literal = select.expressions
    return column.find(exp.Identifier).name, literal.this


@given(TEXT, TEXT)
def test_spark_identifiers_and_strings_round_trip(name, text):
    assert _read(f"SELECT {q(name)}, {spark_string(text)}", "spark") == (name, text)


@given(TEXT, TEXT)
def test_ansi_identifiers_and_strings_round_trip(name, text):
    for dialect in ("duckdb", "postgres", "sqlite"):
        assert _read(f"SELECT {ansi_ident(name)}, {ansi_string(text)}", dialect) == (name, text)
