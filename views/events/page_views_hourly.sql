-- @key: repo_owner, repo_name, hour
-- @description: Page views per repository per hour (a tumbling window on event time); window_final says the hour can take no more events.
--
-- Grouped by the hour an event happened in, not the hour it arrived: a view that arrives 5 minutes
-- late still counts in its hour. Once page_views' watermark (newest event time minus its 10 minutes
-- of lateness) passes the end of an hour, lakemv sets that row's window_final: no event can change it.
-- `window(viewed_at, '1 hour')` with `window.start` groups the same way.
SELECT repo_owner,
       repo_name,
       date_trunc('hour', viewed_at) AS hour,
       count(*) AS views,
       count(DISTINCT viewer) AS viewers
FROM page_views
GROUP BY repo_owner, repo_name, date_trunc('hour', viewed_at)
