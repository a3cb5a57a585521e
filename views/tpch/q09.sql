-- @key: nation, o_year
-- @description: TPC-H Q9, product type profit measure: profit per nation and year (a view over q09_lines).
SELECT nation,
       o_year,
       sum(amount) AS sum_profit
FROM q09_lines
GROUP BY nation, o_year
