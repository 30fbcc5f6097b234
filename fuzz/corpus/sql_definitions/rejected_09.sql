CREATE COUNTER c AS SELECT count(*) FROM posts WHERE is_published IS TRUE
