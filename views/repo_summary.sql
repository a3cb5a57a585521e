-- @key: owner, name
-- @description: One row per repository: its owner's email, star count, open pull requests and contributors.
--
-- GROUP BY aggregates joined on the repository's key, plus a many-to-one lookup of the owner's
-- email through a correlated subquery (min() makes it deterministic should usernames repeat).
WITH star_counts AS (
  SELECT repo_owner, repo_name, count(*) AS stars
  FROM stars
  GROUP BY repo_owner, repo_name
),
pr_stats AS (
  SELECT repo_owner, repo,
         count_if(status = 'open') AS open_pull_requests,
         array_sort(collect_set(author)) AS contributors
  FROM pull_requests
  GROUP BY repo_owner, repo
)
SELECT r.owner,
       r.name,
       r.description,
       (SELECT min(u.email) FROM users u WHERE u.username = r.owner) AS owner_email,
       coalesce(sc.stars, 0) AS stars,
       coalesce(ps.open_pull_requests, 0) AS open_pull_requests,
       coalesce(ps.contributors, array()) AS contributors
FROM repos r
LEFT JOIN star_counts sc ON sc.repo_owner = r.owner AND sc.repo_name = r.name
LEFT JOIN pr_stats ps ON ps.repo_owner = r.owner AND ps.repo = r.name
