CREATE COUNTER blog_posts AS
  SELECT user_id, blog_id, count(*) FROM posts
  WHERE is_published AND NOT is_deleted
  GROUP BY user_id, blog_id;
