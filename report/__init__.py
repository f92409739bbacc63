"""``sensorbench report``: one HTML page of every table and figure, above the analyses.

:mod:`~sensorbench.report.data` computes each section into a dataclass,
:mod:`~sensorbench.report.html` renders it and :mod:`~sensorbench.report.build` lists the
sections in page order and writes the page; ``pose_display`` and ``session_display``
are the text and JSON the pose and session-file commands print."""
