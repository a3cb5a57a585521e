-- @key: supp_nation, cust_nation, l_year
-- @description: TPC-H Q7, volume shipping: revenue per supplier nation, customer nation and year (a view over q07_lines).
SELECT supp_nation,
       cust_nation,
       l_year,
       sum(volume) AS revenue
FROM q07_lines
GROUP BY supp_nation, cust_nation, l_year
