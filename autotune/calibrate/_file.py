"""The calibration file: factors, intervals, the constants they set and the rows behind them."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from autotune.calibrate._fit import FitResult
from autotune.calibrate._fit import Run
from autotune.simulators import ClusterSpec
from autotune.simulators import Simulator
from autotune.simulators.calibrated import constant_overrides
from autotune.simulators.calibration import FACTORS
from autotune.simulators.files import write_atomically
from autotune.simulators.names import one_line

__all__ = ["calibration_record", "write_calibration"]


def _number(value: float) -> float | None:
    return round(float(value), 6) if math.isfinite(value) else None


def calibration_record(
    result: FitResult,
    simulator: Simulator,
    cluster: ClusterSpec | None,
    runs: Sequence[Run],
    data: str,
    command: str,
) -> dict[str, Any]:
    """The calibration as the plain mapping written to its file."""
    calibration = result.calibration
    used = set(result.used)
    record: dict[str, Any] = {
        "name": calibration.name,
        "simulator": calibration.simulator,
        "cluster": calibration.cluster,
        "framework": calibration.framework,
        "factors": {
            k: _number(calibration.factors[k]) for k in FACTORS if k in calibration.factors
        },
        "intervals": {
            k: [_number(v) for v in result.intervals[k]]
            for k in FACTORS
            if k in calibration.factors
        },
        "memory_margin": None
        if calibration.memory_margin is None
        else _number(calibration.memory_margin),
        "overrides": constant_overrides(simulator, cluster, calibration) if cluster else {},
        "layouts": {
            job: {layout: _number(value) for layout, value in layouts.items()}
            for job, layouts in calibration.layouts.items()
        },
        "fit": {
            "command": command,
            "data": data,
            "rows": len(runs),
            "ran": result.n_ran,
            "oom": result.n_oom,
            "memory_rows": result.memory_rows,
            "fitted_rows": len(result.used),
            "rms_log_error_before": _number(result.rms_before),
            "rms_log_error_after": _number(result.rms_after),
            "seconds": round(result.seconds, 2),
            "notes": list(result.notes),
        },
        "rows": [
            {
                "row": run.label,
                "scenario": run.group.partition("/")[2],
                "layout": run.specs[1].describe(),
                "status": run.status,
                "fitted": i in used or run.status == "oom" or math.isfinite(run.peak_memory_gib),
            }
            for i, run in enumerate(runs)
        ],
    }
    return record


_HEADER = """\
# A calibration of the {simulator} simulator, written by python -m autotune.calibrate
# (docs/calibration.md). factors: multipliers of the uncalibrated constants (1: unchanged),
# tp_overlap / dp_overlap: shares of the exposed communication that hide (0: unchanged),
# memory_constant_gib: the reserved memory (GiB; absent: derived per layout, as uncalibrated).
# intervals: {interval:.0%} bootstrap intervals.
# overrides: the constants these factors set on cluster {cluster}. layouts: what each measured
# layout ran beyond the calibrated prediction against its job's other layouts (log; a layout of
# a new job of the same layer and shape takes it). rows: what it was fitted on.
"""


class _Dumper(yaml.SafeDumper):
    """YAML without anchors and aliases, which the reader refuses
    (``autotune.catalog._user_yaml``)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def write_calibration(record: dict[str, Any], path: Path, interval: float) -> Path:
    """Write ``record`` as YAML with a header that explains it, whole or not at all (a full
    disk leaves the previous file as it was); the path written."""
    header = _HEADER.format(
        simulator=one_line(record["simulator"]),
        interval=interval,
        cluster=one_line(record["cluster"] or "-"),
    )
    body = yaml.dump(
        _plain(record),
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=None,
        width=99,
        allow_unicode=True,
    )
    return write_atomically(path, header + body)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
