-- @key: c_count
-- @description: TPC-H Q13, customer distribution: customers per number of orders (a view over q13_orders).
SELECT c_count,
       count(*) AS custdist
FROM q13_orders
GROUP BY c_count
