CREATE COUNTER c AS SELECT CASE WHEN rating > 3 THEN 'good' WHEN rating > 1 THEN 'ok' ELSE 'bad' END AS grade, count(*) FROM posts GROUP BY grade
