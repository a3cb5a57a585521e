-- @key: c_custkey
-- @description: TPC-H Q13's orders per customer, special requests left out (read by q13).
SELECT c_custkey,
       count(o_orderkey) AS c_count
FROM customer LEFT OUTER JOIN orders
  ON c_custkey = o_custkey AND o_comment NOT LIKE '%special%requests%'
GROUP BY c_custkey
