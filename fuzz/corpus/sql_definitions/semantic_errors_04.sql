CREATE COUNTER c AS SELECT sum(is_published) FROM posts
