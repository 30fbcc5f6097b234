CREATE COUNTER c AS SELECT count(*) FROM posts WHERE rating
