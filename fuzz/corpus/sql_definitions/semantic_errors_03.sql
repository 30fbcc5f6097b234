CREATE COUNTER c AS SELECT user_id, avg(rating) FROM posts GROUP BY user_id
