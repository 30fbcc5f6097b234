CREATE COUNTER author_rating AS
  SELECT user_id, blog_id, sum(rating) FROM posts
  WHERE is_published AND NOT is_deleted
  GROUP BY user_id, blog_id;
