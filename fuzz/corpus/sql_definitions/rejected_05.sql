CREATE COUNTER c AS SELECT count(*) FROM posts UNION SELECT count(*) FROM likes
