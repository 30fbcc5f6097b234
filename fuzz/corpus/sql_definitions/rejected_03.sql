CREATE COUNTER c AS SELECT DISTINCT user_id, count(*) FROM posts GROUP BY user_id
