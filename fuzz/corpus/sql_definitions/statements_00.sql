DROP COUNTER blog_posts;
