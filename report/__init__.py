"""``sensorbench report`` (:mod:`~sensorbench.report.build`) and the text and JSON the pose
and session-file commands print (``pose_display``, ``session_display``)."""
