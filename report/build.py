"""``sensorbench report``: one self-contained HTML page with every table and figure
(sections and the simulated truth beside them: docs/DEMO.md)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sensorbench.errors import FitError, SensorbenchError
from sensorbench.logs.atomic_output import atomic_output, check_output, make_dir
from sensorbench.report.data import (
    PoseSection,
    ProgressFn,
    ReportInputs,
    ReportOptions,
    Section,
    StepFn,
    compute_lidar,
    compute_pods,
    compute_pose,
    compute_provenance,
    pose_left_out,
)
from sensorbench.report.html import (
    esc,
    render_lidar,
    render_page,
    render_pods,
    render_pose,
    render_provenance,
)

__all__ = ["SECTIONS", "Report", "ReportOptions", "build_report"]

SECTIONS: tuple[tuple[Callable[[ReportInputs], Section | None], Callable[[Any], str]], ...] = (
    (compute_lidar, render_lidar), (compute_pods, render_pods), (compute_pose, render_pose),
    (compute_provenance, render_provenance),
)
"""(compute, render) per section in page order: ``compute(inputs)`` in
:mod:`~sensorbench.report.data` returns the section's dataclass or None (nothing for it);
``render(section)`` in :mod:`~sensorbench.report.html` returns its HTML."""


_STEP = 1000
"""Units of one section in ``steps``."""


def _within(steps: StepFn, k: int, n: int) -> Callable[[float], None]:
    """``within(fraction)`` of section ``k`` as ``steps(done, total)``."""
    return lambda f: steps(k * _STEP + int(_STEP * min(max(f, 0.0), 1.0)), n * _STEP)


@dataclass
class Report:
    """The written page (``path``) and its computed sections in page order (None: nothing
    for it in the inputs)."""

    path: Path
    sessions: list[Path]
    sections: list[Section | None]

    @property
    def data(self) -> dict[str, Any]:
        """``{"sessions": [...]}`` then each section's keys (SI units, JSON-ready after
        ``json_ready``)."""
        data: dict[str, Any] = {"sessions": [str(p) for p in self.sessions]}
        for s in self.sections:
            if s is not None:
                data.update(s.as_dict())
        return data


def build_report(
    sessions: Sequence[str | os.PathLike[str]], out_dir: str | os.PathLike[str],
    models_dir: str | os.PathLike[str] | None = None, options: ReportOptions | None = None,
    progress: ProgressFn | None = None, force: bool = False, steps: StepFn | None = None,
) -> Report:
    """Analyse ``sessions`` (with the models in ``models_dir``) and write ``report.html``.

    The page is renamed into place when complete; an existing one is replaced only with
    ``force``. ``progress(message)`` says what is done, ``steps(done, total)`` how far.

    Raises:
        SensorbenchError: an unreadable session or model, or an analysis that failed.
        OutputError: ``report.html`` exists and ``force`` is False."""
    opts = options or ReportOptions()
    say = progress or (lambda _m: None)
    paths = [Path(p) for p in sessions]
    if not paths:
        raise FitError("no sessions to report on")
    for p in paths:
        if not p.is_file():
            raise FitError(f"{p}: no such session file")
    models = None if models_dir is None else Path(models_dir)
    if models is not None and not models.is_dir():
        raise FitError(f"{models}: not a directory of model files")
    out = Path(out_dir)
    make_dir(out, "nothing was written")
    check_output(out / "report.html", force=force, inputs=paths)
    sections: list[Section | None] = []
    with tempfile.TemporaryDirectory(prefix="sensorbench-report-") as tmp:
        inputs = ReportInputs(paths, models, opts, Path(tmp), say)
        body = []
        for k, (compute, render) in enumerate(SECTIONS):
            here = inputs
            if steps is not None:
                here = replace(inputs, within=_within(steps, k, len(SECTIONS)))
                steps(k * _STEP, len(SECTIONS) * _STEP)
            section = compute(here)
            sections.append(section)
            if section is not None:
                body.append(render(section))
            elif compute is compute_pose and (why := pose_left_out(here)):
                body.append(f"<h2>Pose sensor</h2><p class='note'>{esc(why)}</p>")
    if steps is not None:
        steps(len(SECTIONS) * _STEP, len(SECTIONS) * _STEP)
    summaries = [s.summary() for s in sections if isinstance(s, PoseSection)]
    page = render_page("".join(body), len(paths), summaries)
    path = out / "report.html"
    try:
        with atomic_output(path, force=force, inputs=paths) as tmp:
            tmp.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise SensorbenchError(f"cannot write {path}: {exc}") from exc
    return Report(path, paths, sections)
