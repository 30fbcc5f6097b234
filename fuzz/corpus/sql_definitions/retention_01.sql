CREATE COUNTER c AS SELECT date_trunc('week', created_at) AS w, count(*) FROM likes GROUP BY w WITH (retention = '2 weeks')
