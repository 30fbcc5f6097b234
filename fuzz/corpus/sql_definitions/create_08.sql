CREATE COUNTER weekly AS SELECT date_trunc('WEEK', created_at) AS week, count(*) FROM posts GROUP BY week
