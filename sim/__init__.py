"""A 2D world, trajectories and sensor models with known truth, and byte-exact device emulators on pseudo-terminals."""
