CREATE COUNTER c AS SELECT lower(title) t, count(*) FROM posts GROUP BY lower(title)
