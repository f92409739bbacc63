"""Estimation: pod kinematics, the split x/y/heading Kalman filters, a joint baseline, dual-scan merge."""
