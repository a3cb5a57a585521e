-- @key: scope
-- @description: TPC-H Q6, forecasting revenue change: one row, keyed by a constant.
SELECT 'all' AS scope,
       sum(l_extendedprice * l_discount) AS revenue
FROM lineitem
WHERE l_shipdate >= date '1994-01-01'
  AND l_shipdate < date '1994-01-01' + INTERVAL '1' YEAR
  AND l_discount BETWEEN 0.06 - 0.01 AND 0.06 + 0.01
  AND l_quantity < 24
