"""Offline characterization and fitting, one subpackage per subject.

- :mod:`~sensorbench.characterize.lidar`: a lidar datasheet from measured turns.
- :mod:`~sensorbench.characterize.pods`: pod geometry, slip, drift and filter noise fits.
- :mod:`~sensorbench.characterize.pose`: the pose-error model, its Monte Carlo
  validation and the two-part verdict.
"""
