CREATE SOURCE s (a text(5))
