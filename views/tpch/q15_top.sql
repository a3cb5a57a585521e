-- @key: scope
-- @description: TPC-H Q15's highest supplier revenue (one row, over q15_revenue).
SELECT 'all' AS scope,
       max(total_revenue) AS max_revenue
FROM q15_revenue
