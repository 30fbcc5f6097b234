CREATE COUNTER c AS SELECT count(*) FROM posts JOIN likes ON likes.post_id = posts.id
