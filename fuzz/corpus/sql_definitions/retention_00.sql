CREATE COUNTER post_likes_per_day AS
  SELECT post_id, date_trunc('day', created_at) AS day, count(*) FROM likes
  GROUP BY post_id, day
  WITH (retention = '30 days');
