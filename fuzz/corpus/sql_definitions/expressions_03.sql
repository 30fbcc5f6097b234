CREATE COUNTER c AS SELECT count(*) FROM posts WHERE NOT is_deleted AND is_published OR title IS NULL
