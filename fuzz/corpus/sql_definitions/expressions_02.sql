CREATE COUNTER c AS SELECT count(*) FROM posts WHERE rating = 1 OR rating <> 2 OR rating != 3 OR rating < 4 OR rating <= 5 OR rating > 6 OR rating >= 7
