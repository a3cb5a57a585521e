-- @key: p_partkey, ps_suppkey
-- @description: TPC-H Q2, minimum cost supplier: a row per (part, supplier) pair, keyed by partsupp's key, the supplier's among the outputs (a view over q02_min).
SELECT s_acctbal,
       s_name,
       n_name,
       ps_partkey AS p_partkey,
       ps_suppkey,
       p_mfgr,
       s_address,
       s_phone,
       s_comment
FROM partsupp, part, supplier, nation, region, q02_min
WHERE p_partkey = ps_partkey
  AND s_suppkey = ps_suppkey
  AND p_size = 15
  AND p_type LIKE '%BRASS'
  AND s_nationkey = n_nationkey
  AND n_regionkey = r_regionkey
  AND r_name = 'EUROPE'
  AND min_partkey = ps_partkey
  AND ps_supplycost = min_cost
