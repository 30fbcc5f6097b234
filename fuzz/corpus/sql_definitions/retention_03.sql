CREATE COUNTER c AS SELECT count(*) FROM likes WITH (retention = '30 days')
