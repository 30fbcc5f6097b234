CREATE COUNTER c AS SELECT count(*) FROM posts garbage here
