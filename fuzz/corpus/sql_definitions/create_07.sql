CREATE COUNTER "Likes By Kind" AS SELECT likes."Kind", count(*) FROM likes GROUP BY "Kind"
