CREATE COUNTER c AS SELECT count(*) FROM posts WHERE blog_id NOT IN (1, 2, 3)
