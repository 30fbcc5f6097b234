CREATE COUNTER monthly AS SELECT date_trunc('month', created_at) AS m, sum(rating) FROM posts WHERE created_at IS NOT NULL GROUP BY m
