-- @key: min_partkey
-- @description: TPC-H Q2's lowest supply cost of each part among European suppliers (read by q02).
SELECT ps_partkey AS min_partkey,
       min(ps_supplycost) AS min_cost
FROM partsupp, supplier, nation, region
WHERE s_suppkey = ps_suppkey
  AND s_nationkey = n_nationkey
  AND n_regionkey = r_regionkey
  AND r_name = 'EUROPE'
GROUP BY ps_partkey
