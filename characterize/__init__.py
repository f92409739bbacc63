"""Offline characterization and fitting: lidar statistics, pod geometry, filter noise, pose-error models, validation."""
