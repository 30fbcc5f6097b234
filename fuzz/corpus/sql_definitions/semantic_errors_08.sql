CREATE COUNTER c AS SELECT count(*) FROM posts WHERE rating IN (1, 'two')
