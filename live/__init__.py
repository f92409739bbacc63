"""The live runtime: the split filters, the dual-lidar merge, Foxglove and UDP as data arrive.

Above ``fusion`` (whose step code it runs in chunks) and below ``demo``, ``bench`` and
the commands (docs/ARCHITECTURE.md). :mod:`~sensorbench.live.runtime` is the entry:
a :class:`~sensorbench.drivers.capture.CaptureConsumer` for ``run_capture``.
"""
