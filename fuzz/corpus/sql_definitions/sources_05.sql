CREATE SOURCE s (a varchar(10)(20))
