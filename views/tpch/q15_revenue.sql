-- @key: supplier_no
-- @description: TPC-H Q15's revenue0: each supplier's revenue in a quarter (read by q15 and q15_top).
SELECT l_suppkey AS supplier_no,
       sum(l_extendedprice * (1 - l_discount)) AS total_revenue
FROM lineitem
WHERE l_shipdate >= date '1996-01-01'
  AND l_shipdate < date '1996-01-01' + INTERVAL '3' MONTH
GROUP BY l_suppkey
