"""SQL that lakemv generates: quoting and literals, the incremental step and its MERGE (sqlglot trees), the
feeds' SQL, aggregates by delta, the content diff."""
