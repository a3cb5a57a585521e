-- @key: email
-- @description: One document per user (seed 000's UserProfile): starred repos and pull requests embedded as lists, payment verification as a flag.
--
-- Starred repos and pull requests are aggregated in CTEs grouped by the column users are joined on,
-- so each user matches at most one row of each; the planner follows those equalities to know which
-- profiles a changed star, repo, pull request or payment row touches.
WITH starred AS (
  SELECT s.username,
         array_sort(collect_list(struct(s.repo_owner, s.repo_name, r.description AS description))) AS starred_repos
  FROM stars s
  LEFT JOIN repos r ON r.owner = s.repo_owner AND r.name = s.repo_name
  GROUP BY s.username
),
authored AS (
  SELECT author,
         array_sort(collect_list(struct(repo_owner, repo, `index`, title, status, created_at))) AS pull_requests
  FROM pull_requests
  GROUP BY author
)
SELECT u.email,
       u.username,
       coalesce(st.starred_repos, array()) AS starred_repos,
       coalesce(a.pull_requests, array()) AS pull_requests,
       coalesce((SELECT bool_or(p.verified) FROM payment_info p WHERE p.user_id = u.id), false) AS payment_verified
FROM users u
LEFT JOIN starred st ON st.username = u.username
LEFT JOIN authored a ON a.author = u.username
