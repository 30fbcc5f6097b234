CREATE COUNTER c AS SELECT coalesce(rating, title) AS x, count(*) FROM posts GROUP BY x
