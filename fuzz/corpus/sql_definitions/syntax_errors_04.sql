CREATE COUNTER select AS SELECT count(*) FROM posts
