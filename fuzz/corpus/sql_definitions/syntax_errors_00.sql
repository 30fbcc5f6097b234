CREATE COUNTER c AS SELECT count(*) FROM posts WHERE title = 'open
