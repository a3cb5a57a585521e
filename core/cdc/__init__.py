"""CDC semantics: Debezium envelopes, coercion, change sets, source transactions, schema drift, effects."""
