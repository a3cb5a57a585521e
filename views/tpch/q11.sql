-- @key: ps_partkey
-- @description: TPC-H Q11, important stock identification: the parts whose value passes the threshold (a view over views).
SELECT ps_partkey,
       value
FROM q11_parts
WHERE value > (SELECT threshold FROM q11_total)
