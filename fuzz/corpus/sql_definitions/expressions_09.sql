CREATE COUNTER c AS SELECT CASE status WHEN 'live' THEN 1 WHEN 'draft' THEN 2 END AS s, count(*) FROM posts GROUP BY s
