CREATE COUNTER c AS SELECT count(*) FROM comments
