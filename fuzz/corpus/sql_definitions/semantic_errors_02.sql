CREATE COUNTER c AS SELECT count(*) FROM posts WHERE count(*) > 1
