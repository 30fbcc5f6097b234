CREATE SOURCE s (a bigserial)
