"""Estimation: pod kinematics, split x/y/heading Kalman filters, a joint baseline, scan merge."""
