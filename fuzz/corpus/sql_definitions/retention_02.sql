CREATE COUNTER c AS SELECT date_trunc('day', created_at) AS d, count(*) FROM likes GROUP BY d WITH (retention = '1 minute')
