CREATE COUNTER c AS SELECT blog_id AS user_id, count(*) FROM posts GROUP BY user_id
