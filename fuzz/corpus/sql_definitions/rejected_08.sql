CREATE COUNTER c AS SELECT count(*) FROM posts WHERE CAST(rating AS text) = '1'
