CREATE COUNTER hourly AS SELECT date_trunc('hour', created_at) AS h, date_trunc('minute', created_at) AS mi, count(*) FROM posts GROUP BY h, mi WITH (retention = '1 day')
