CREATE COUNTER c AS SELECT count(*) FROM posts WHERE title + 1 = 2
