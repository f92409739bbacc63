"""Pose-sensor error: alignment, segments, model fit, Monte Carlo validation, verdict, figures."""
