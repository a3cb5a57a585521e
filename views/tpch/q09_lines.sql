-- @key: l_orderkey, l_linenumber
-- @description: TPC-H Q9's profit per line item of a green part, with the supplier's nation and the order's year (read by q09).
SELECT l_orderkey,
       l_linenumber,
       n_name AS nation,
       year(o_orderdate) AS o_year,
       l_extendedprice * (1 - l_discount) - ps_supplycost * l_quantity AS amount
FROM lineitem, part, supplier, partsupp, orders, nation
WHERE s_suppkey = l_suppkey
  AND ps_suppkey = l_suppkey
  AND ps_partkey = l_partkey
  AND p_partkey = l_partkey
  AND o_orderkey = l_orderkey
  AND s_nationkey = n_nationkey
  AND p_name LIKE '%green%'
