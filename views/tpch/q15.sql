-- @key: s_suppkey
-- @description: TPC-H Q15, top supplier: the suppliers whose revenue is the highest (a view over views).
SELECT s_suppkey,
       s_name,
       s_address,
       s_phone,
       total_revenue
FROM supplier, q15_revenue
WHERE s_suppkey = supplier_no
  AND total_revenue = (SELECT max_revenue FROM q15_top)
