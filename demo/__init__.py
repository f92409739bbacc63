"""``sensorbench demo``: the emulated robot captured, fitted, validated and reported end to end.

The layer above the simulator and the analysis: it drives the emulators (``sim``)
through the real capture path (``drivers``) and runs the fits and the report
(``fusion``, ``characterize``) on what was captured.
"""
