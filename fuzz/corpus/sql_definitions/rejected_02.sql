CREATE COUNTER c AS SELECT count(*) FROM posts WHERE blog_id IN (SELECT id FROM blogs)
