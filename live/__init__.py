"""The live runtime: the split filters, the dual-lidar merge, Foxglove, UDP and ROS 2 as
data arrive; :mod:`~sensorbench.live.runtime` is the entry (docs/LIVE.md)."""
