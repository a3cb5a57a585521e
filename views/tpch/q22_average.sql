-- @key: scope
-- @description: TPC-H Q22's average positive balance of the customers of seven country codes (one row, read by q22).
SELECT 'all' AS scope,
       avg(c_acctbal) AS average
FROM customer
WHERE c_acctbal > 0.00
  AND substring(c_phone, 1, 2) IN ('13', '31', '23', '29', '30', '18', '17')
