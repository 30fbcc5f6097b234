create counter c as select blog_id, user_id, count(id) from posts group by user_id, blog_id
