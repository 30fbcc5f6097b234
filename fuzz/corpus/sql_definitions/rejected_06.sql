CREATE COUNTER c AS SELECT count(*) FILTER (WHERE is_published) FROM posts
