-- @key: scope
-- @description: TPC-H Q11's threshold: a share of the German stock's total value (one row, over q11_parts).
SELECT 'all' AS scope,
       sum(value) * 0.0001 AS threshold
FROM q11_parts
