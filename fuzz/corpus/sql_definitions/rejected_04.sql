CREATE COUNTER c AS SELECT user_id, count(*) FROM posts GROUP BY user_id ORDER BY user_id
