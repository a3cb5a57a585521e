-- @key: cntrycode
-- @description: TPC-H Q22, global sales opportunity: customers above the average balance with no order, per country code (a view over q22_average).
SELECT cntrycode,
       count(*) AS numcust,
       sum(c_acctbal) AS totacctbal
FROM (
  SELECT substring(c_phone, 1, 2) AS cntrycode,
         c_acctbal
  FROM customer
  WHERE substring(c_phone, 1, 2) IN ('13', '31', '23', '29', '30', '18', '17')
    AND c_acctbal > (SELECT average FROM q22_average)
    AND NOT EXISTS (SELECT * FROM orders WHERE o_custkey = c_custkey)
) AS custsale
GROUP BY cntrycode
