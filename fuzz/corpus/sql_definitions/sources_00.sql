CREATE SOURCE posts (id bigint, title text, created_at timestamp, is_published boolean);
