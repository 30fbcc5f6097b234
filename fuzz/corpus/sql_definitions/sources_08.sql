CREATE SOURCE s (a bigint CHECK (a > 0))
