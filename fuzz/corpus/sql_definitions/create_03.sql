CREATE COUNTER all_posts AS SELECT count(*) FROM posts
