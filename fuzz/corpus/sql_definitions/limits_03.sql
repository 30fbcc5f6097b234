CREATE COUNTER c AS SELECT count(*) FROM posts WHERE ((rating BETWEEN 1 AND 2) BETWEEN false AND true) BETWEEN is_published AND true
