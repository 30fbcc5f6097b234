CREATE COUNTER c AS SELECT user_id, count(*) FROM posts GROUP BY 1
