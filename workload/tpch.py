"""TPC-H as a change stream: the benchmark's tables as a Debezium snapshot, then refresh rounds.

The rows come from DuckDB's `dbgen` (the `tpch` extension, installed from its PyPI wheel like the
others: lakemv.duck.query). Each round applies TPC-H's two refresh functions - RF1 inserts new orders
with their line items, RF2 deletes old orders with theirs - and updates the columns the queries join
and filter on: an order moves to another customer, a customer and a supplier to another nation, a line
item to another supplier of its part, a part changes type and size, prices and dates move. Every change
is a Debezium envelope (`lakemv.workload.debezium`) in the landing folder of its table.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

from lakemv.catalog.declarations import SourceTable, load_sources
from lakemv.catalog.settings import PROJECT_ROOT
from lakemv.workload.debezium import connect_schema, envelope, write_landing_files

SOURCES_DIR = PROJECT_ROOT / "catalog" / "sources" / "tpch"
VIEWS_DIR = PROJECT_ROOT / "views" / "tpch"
TABLES = ("region", "nation", "supplier", "part", "partsupp", "customer", "orders", "lineitem")
_EPOCH = date(1970, 1, 1)
_CENT = Decimal("0.01")


# The queries views/tpch answers through views over views or with their key added, as TPC-H writes
# them (final ORDER BY / LIMIT dropped; Q15's view revenue0 as a CTE): each must equal its view's rows
# (their columns).
ORIGINALS = {
    "q02": """SELECT s_acctbal, s_name, n_name, p_partkey, p_mfgr, s_address, s_phone, s_comment
FROM part, supplier, partsupp, nation, region
WHERE p_partkey = ps_partkey AND s_suppkey = ps_suppkey AND p_size = 15 AND p_type LIKE '%BRASS'
  AND s_nationkey = n_nationkey AND n_regionkey = r_regionkey AND r_name = 'EUROPE'
  AND ps_supplycost = (SELECT min(ps_supplycost) FROM partsupp, supplier, nation, region
                       WHERE p_partkey = ps_partkey AND s_suppkey = ps_suppkey AND s_nationkey = n_nationkey
                         AND n_regionkey = r_regionkey AND r_name = 'EUROPE')""",
    "q11": """SELECT ps_partkey, sum(ps_supplycost * ps_availqty) AS value
FROM partsupp, supplier, nation
WHERE ps_suppkey = s_suppkey AND s_nationkey = n_nationkey AND n_name = 'GERMANY'
GROUP BY ps_partkey
HAVING sum(ps_supplycost * ps_availqty) > (
  SELECT sum(ps_supplycost * ps_availqty) * 0.0001 FROM partsupp, supplier, nation
  WHERE ps_suppkey = s_suppkey AND s_nationkey = n_nationkey AND n_name = 'GERMANY')""",
    "q13": """SELECT c_count, count(*) AS custdist
FROM (SELECT c_custkey, count(o_orderkey) AS c_count
      FROM customer LEFT OUTER JOIN orders ON c_custkey = o_custkey AND o_comment NOT LIKE '%special%requests%'
      GROUP BY c_custkey) AS c_orders
GROUP BY c_count""",
    "q15": """WITH revenue0 AS (
  SELECT l_suppkey AS supplier_no, sum(l_extendedprice * (1 - l_discount)) AS total_revenue FROM lineitem
  WHERE l_shipdate >= date '1996-01-01' AND l_shipdate < date '1996-01-01' + INTERVAL '3' MONTH GROUP BY l_suppkey)
SELECT s_suppkey, s_name, s_address, s_phone, total_revenue
FROM supplier, revenue0
WHERE s_suppkey = supplier_no AND total_revenue = (SELECT max(total_revenue) FROM revenue0)""",
    "q20": """SELECT s_name, s_address
FROM supplier, nation
WHERE s_suppkey IN (SELECT ps_suppkey FROM partsupp
                    WHERE ps_partkey IN (SELECT p_partkey FROM part WHERE p_name LIKE 'forest%')
                      AND ps_availqty > (SELECT 0.5 * sum(l_quantity) FROM lineitem
                                         WHERE l_partkey = ps_partkey AND l_suppkey = ps_suppkey
                                           AND l_shipdate >= date '1994-01-01' AND l_shipdate < date '1994-01-01' + INTERVAL '1' YEAR))
  AND s_nationkey = n_nationkey AND n_name = 'CANADA'""",
    "q22": """SELECT cntrycode, count(*) AS numcust, sum(c_acctbal) AS totacctbal
FROM (SELECT substring(c_phone, 1, 2) AS cntrycode, c_acctbal FROM customer
      WHERE substring(c_phone, 1, 2) IN ('13', '31', '23', '29', '30', '18', '17')
        AND c_acctbal > (SELECT avg(c_acctbal) FROM customer WHERE c_acctbal > 0.00
                         AND substring(c_phone, 1, 2) IN ('13', '31', '23', '29', '30', '18', '17'))
        AND NOT EXISTS (SELECT * FROM orders WHERE o_custkey = c_custkey)) AS custsale
GROUP BY cntrycode""",
}


def tpch_sources() -> dict[str, SourceTable]:
    return load_sources([SOURCES_DIR])


def generate(scale: float) -> dict[str, list[dict[str, Any]]]:
    """TPC-H's rows at scale factor `scale` (dbgen), dates as days since 1970 and decimals as Decimal."""
    import duckdb
    import duckdb_extensions

    con = duckdb.connect(config={"threads": "1", "autoinstall_known_extensions": "false", "autoload_known_extensions": "false"})
    try:
        duckdb_extensions.import_extension("tpch", con=con)  # from its PyPI wheel: nothing is downloaded
        con.execute("LOAD tpch")
        con.execute(f"CALL dbgen(sf={float(scale)})")
        tables = {}
        for table in TABLES:
            result = con.execute(f"SELECT * FROM {table}")
            names = [d[0] for d in result.description]
            tables[table] = [{n: _value(v) for n, v in zip(names, row, strict=True)} for row in result.fetchall()]
        return tables
    finally:
        con.close()


def _value(value: Any) -> Any:
    if isinstance(value, date):
        return (value - _EPOCH).days
    return value


@dataclass
class TpchConfig:
    scale: float = 0.001
    rounds: int = 2
    seed: int = 7
    orders_per_round: int = 6  # RF1 inserts this many orders, RF2 deletes as many
    updates_per_round: int = 12  # of each kind of update


class TpchWorkload:
    """The snapshot, then `rounds` refresh rounds, as Debezium envelopes per table; `rows` holds each
    table as the source database has it after the rounds so far."""

    def __init__(self, config: TpchConfig, sources: Mapping[str, SourceTable] | None = None):
        self.config = config
        self.sources = dict(sources or tpch_sources())
        self.rng = random.Random(config.seed)
        generated = generate(config.scale)
        self.rows: dict[str, dict[tuple, dict[str, Any]]] = {
            t: {self._key(t, r): r for r in generated[t]} for t in TABLES
        }
        self.lsn = 1_000
        self.ts_ms = 1_700_000_000_000

    def _key(self, table: str, row: Mapping[str, Any]) -> tuple:
        return tuple(row[c] for c in self.sources[table].primary_key)

    def _event(self, table: str, op: str, before: dict | None, after: dict | None, snapshot: bool = False) -> dict[str, Any]:
        self.lsn += 16
        self.ts_ms += 1
        source = self.sources[table]
        return envelope(source, op, _wire(before), _wire(after), self.lsn, self.ts_ms, snapshot=snapshot)

    def snapshot(self) -> dict[str, list[dict[str, Any]]]:
        """Every row of every table, as Debezium's snapshot reads (`op: r`)."""
        return {t: [self._event(t, "r", None, row, snapshot=True) for row in self.rows[t].values()] for t in TABLES}

    def rounds(self) -> Iterator[dict[str, list[dict[str, Any]]]]:
        """The snapshot, then each refresh round's changes per table."""
        yield self.snapshot()
        for _ in range(self.config.rounds):
            yield self.refresh()

    # ---- one refresh round ------------------------------------------------------------------------
    def refresh(self) -> dict[str, list[dict[str, Any]]]:
        events: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
        n, rng = self.config.updates_per_round, self.rng
        self._insert_orders(events)
        self._delete_orders(events)
        self._update(events, "orders", n, lambda r: {"o_custkey": self._pick("customer")[0], "o_orderpriority": rng.choice(_PRIORITIES)})
        self._update(events, "customer", n, lambda r: {"c_nationkey": self._pick("nation")[0], "c_acctbal": _money(rng.uniform(-999, 9999))})
        self._update(events, "supplier", max(1, n // 4), lambda r: {"s_nationkey": self._pick("nation")[0]})
        self._update(events, "part", n, lambda r: {"p_type": rng.choice(_TYPES), "p_size": rng.randint(1, 50)})
        self._update(events, "partsupp", n, lambda r: {"ps_supplycost": _money(rng.uniform(1, 1000))})
        self._update(events, "lineitem", n, self._lineitem_change)
        return events

    def _pick(self, table: str) -> tuple:
        return self.rng.choice(list(self.rows[table]))

    def _update(self, events: dict[str, list[dict[str, Any]]], table: str, count: int, change: Any) -> None:
        for key in self.rng.sample(list(self.rows[table]), min(count, len(self.rows[table]))):
            before = self.rows[table][key]
            after = {**before, **change(before)}
            self.rows[table][key] = after
            events[table].append(self._event(table, "u", before, after))

    def _lineitem_change(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """Another supplier of the same part (a pair partsupp holds), a new quantity, discount and dates."""
        suppliers = [s for p, s in self.rows["partsupp"] if p == row["l_partkey"]]
        ship = row["l_shipdate"] + self.rng.randint(-60, 60)
        return {
            "l_suppkey": self.rng.choice(suppliers) if suppliers else row["l_suppkey"],
            "l_quantity": Decimal(self.rng.randint(1, 50)),
            "l_discount": Decimal(self.rng.randint(0, 10)) / 100,
            "l_shipdate": ship,
            "l_commitdate": ship + self.rng.randint(-30, 30),
            "l_receiptdate": ship + self.rng.randint(1, 30),
        }

    def _insert_orders(self, events: dict[str, list[dict[str, Any]]]) -> None:
        """RF1: new orders past the highest key, each with one to seven line items."""
        rng, next_key = self.rng, max(k[0] for k in self.rows["orders"]) + 1
        pairs = list(self.rows["partsupp"])
        for number in range(self.config.orders_per_round):
            day = (date(1992, 1, 1) - _EPOCH).days + rng.randint(0, 2400)
            order = {
                "o_orderkey": next_key + number, "o_custkey": self._pick("customer")[0], "o_orderstatus": rng.choice("OFP"),
                "o_totalprice": _money(rng.uniform(1000, 400_000)), "o_orderdate": day, "o_orderpriority": rng.choice(_PRIORITIES),
                "o_clerk": f"Clerk#{rng.randint(1, 1000):09d}", "o_shippriority": 0, "o_comment": "rf1",
            }  # fmt: skip
            self.rows["orders"][(order["o_orderkey"],)] = order
            events["orders"].append(self._event("orders", "c", None, order))
            for line in range(1, rng.randint(1, 7) + 1):
                part, supplier = rng.choice(pairs)
                ship = day + rng.randint(1, 121)
                item = {
                    "l_orderkey": order["o_orderkey"], "l_partkey": part, "l_suppkey": supplier, "l_linenumber": line,
                    "l_quantity": Decimal(rng.randint(1, 50)), "l_extendedprice": _money(rng.uniform(900, 100_000)),
                    "l_discount": Decimal(rng.randint(0, 10)) / 100, "l_tax": Decimal(rng.randint(0, 8)) / 100,
                    "l_returnflag": rng.choice("RAN"), "l_linestatus": rng.choice("OF"), "l_shipdate": ship,
                    "l_commitdate": day + rng.randint(30, 90), "l_receiptdate": ship + rng.randint(1, 30),
                    "l_shipinstruct": rng.choice(_INSTRUCTIONS), "l_shipmode": rng.choice(_MODES), "l_comment": "rf1",
                }  # fmt: skip
                self.rows["lineitem"][(item["l_orderkey"], line)] = item
                events["lineitem"].append(self._event("lineitem", "c", None, item))

    def _delete_orders(self, events: dict[str, list[dict[str, Any]]]) -> None:
        """RF2: old orders deleted with their line items (key-only deletes, as Debezium sends by default)."""
        for key in self.rng.sample(sorted(self.rows["orders"]), self.config.orders_per_round):
            for item_key in [k for k in self.rows["lineitem"] if k[0] == key[0]]:
                item = self.rows["lineitem"].pop(item_key)
                events["lineitem"].append(self._event("lineitem", "d", {c: item[c] for c in ("l_orderkey", "l_linenumber")}, None))
            order = self.rows["orders"].pop(key)
            events["orders"].append(self._event("orders", "d", {"o_orderkey": order["o_orderkey"]}, None))


_PRIORITIES = ("1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW")
_TYPES = ("PROMO BURNISHED COPPER", "ECONOMY ANODIZED STEEL", "MEDIUM POLISHED TIN", "STANDARD BRUSHED BRASS", "LARGE PLATED NICKEL")
_INSTRUCTIONS = ("DELIVER IN PERSON", "COLLECT COD", "NONE", "TAKE BACK RETURN")
_MODES = ("AIR", "AIR REG", "MAIL", "SHIP", "TRUCK", "RAIL", "FOB")


def _money(value: float) -> Decimal:
    return Decimal(str(value)).quantize(_CENT)


def _wire(row: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Decimals as Debezium's `decimal.handling.mode=string` sends them (the sources declare it)."""
    if row is None:
        return None
    return {k: str(v) if isinstance(v, Decimal) else v for k, v in row.items()}


def write_round(out: Path, number: int, events: Mapping[str, list[dict[str, Any]]], sources: Mapping[str, SourceTable]) -> None:
    """A round's envelopes in `out/<table>/` (half of them with Kafka Connect's schema wrapper)."""
    rng = random.Random(number)
    for table, batch in events.items():
        if batch:
            write_landing_files(out, table, batch, connect_schema(sources[table], server="tpch"), rng, f"round-{number:03d}")
