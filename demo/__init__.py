"""``sensorbench demo``: the emulated robot captured through the real drivers, fitted,
validated and reported end to end."""
