CREATE COUNTER c AS SELECT rating + 1 - 2 * 3 / 4 % 5 AS r, count(*) FROM posts GROUP BY r
