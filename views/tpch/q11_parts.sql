-- @key: ps_partkey
-- @description: TPC-H Q11's stock value per part held by German suppliers (read by q11 and q11_total).
SELECT ps_partkey,
       sum(ps_supplycost * ps_availqty) AS value
FROM partsupp, supplier, nation
WHERE ps_suppkey = s_suppkey
  AND s_nationkey = n_nationkey
  AND n_name = 'GERMANY'
GROUP BY ps_partkey
