CREATE COUNTER c AS SELECT count(*) posts
