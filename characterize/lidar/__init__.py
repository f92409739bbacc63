"""Lidar characterization: timing, returns, static stretches, range noise, figures."""
