-- @key: click_id
-- @description: Each click on a search result with the search it followed within the hour (seed 003: a stream-stream join).
--
-- A click and its search arrive in either order. Neither stream is kept forever: the BETWEEN bounds
-- how far apart they can be, so a search stays in the local state only until the clicks' watermark
-- is an hour past it, and a click until the searches' watermark passes it (lakemv explain shows it).
SELECT c.click_id,
       c.search_id,
       s.user,
       s.query,
       c.result,
       s.searched_at,
       c.clicked_at
FROM clicks c
JOIN searches s
  ON s.search_id = c.search_id
 AND c.clicked_at BETWEEN s.searched_at AND s.searched_at + INTERVAL '1' HOUR
