CREATE COUNTER c AS SELECT count(*) FROM posts WHERE title IS NOT NULL AND status IN ('draft', 'live', NULL)
