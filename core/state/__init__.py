"""The local indexed state: what a batch looks up instead of scanning Iceberg tables.

Per mirror a view reads: its rows by primary key (tombstones included, for the position guard and
old images) and one index per column set a view looks the table up by. Per view: a digest of each
current row by key, for the diff. The Iceberg tables stay the source of truth; the store records
which snapshot of each table it reflects and is rebuilt from them whenever it is not in step.

* `layout` (pure): what the store holds and how each view's lookups run, derived from the plans;
* `codec` (pure): Arrow values <-> the store's values;
* `walk` (pure over a store): the view keys changed rows reach, and the rows those keys read;
* `store` (SQLite): the tables, indexes and the snapshot record, each update one transaction;
* `places`: where each row of a located part lives in its Iceberg table (data file, position);
* `lakemv.spark.batch.sync` (Iceberg): checks the record against the tables, rebuilds what is out of step.
"""
