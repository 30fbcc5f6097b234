CREATE SOURCE s (id bigint, "x\y" bigint)
