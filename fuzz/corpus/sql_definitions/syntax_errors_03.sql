SELECT count(*) FROM posts
