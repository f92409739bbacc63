"""Offline characterization and fitting.

Lidar statistics, pod geometry, filter noise, pose-error models and validation.
"""
