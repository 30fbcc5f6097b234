CREATE SOURCE words (text text, timestamp timestamp, int int, source bigint, counter boolean)
