"""A 2D world, trajectories and sensor models with known truth; byte-exact device emulators
served on pseudo-terminals."""
