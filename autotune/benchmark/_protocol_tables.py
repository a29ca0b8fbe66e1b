"""The tables of the calibration protocols: regret@1 per source side by side, and regret
against the number of probes K (the report's "Protocols side by side" and the curve)."""

from __future__ import annotations

import math

import pandas as pd

from autotune.benchmark._score import BenchmarkResult
from autotune.benchmark._unscored import NOT_SCORED
from autotune.benchmark._unscored import wholly_unscored

__all__ = ["curve_label", "curve_table", "has_protocols", "protocol_table", "regret_curve"]


def _pct(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{100 * value:.1f}%"


_ZERO_SHOT = "zero_shot"


def _simulator_of(name: str) -> str:
    """The simulator a protocol's ranker belongs to (``analytical, probe K=3``; "" for a
    baseline of none, ``random probes K=3``)."""
    return name.split(",")[0] if "," in name else ""


def curve_label(simulator: str, protocol: str) -> str:
    """How the regret curve names one protocol of one simulator (of none: the protocol)."""
    return f"{simulator}, {protocol}" if simulator else protocol


def has_protocols(result: BenchmarkResult) -> bool:
    """Whether any ranker saw the data another way than zero-shot."""
    return any(s.get("protocol", _ZERO_SHOT) != _ZERO_SHOT for s in result.summaries.values())


def protocol_table(result: BenchmarkResult) -> pd.DataFrame:
    """Protocols side by side: one row per ranker, regret@1 mean per source and overall."""
    sources = sorted(
        {
            source
            for s in result.summaries.values()
            for source, f in s["by_source"].items()
            if f["n_scenarios"]
        }
    )
    records = []
    for name, s in result.summaries.items():
        record = {
            "ranker": name,
            "protocol": s.get("protocol", _ZERO_SHOT),
            "K": s.get("probes") or "-",
        }
        for source in sources:
            figures = s["by_source"].get(source)
            record[source] = _pct(figures["regret_at_1_mean"]) if figures else "-"
            if source in wholly_unscored(s):
                record[source] = NOT_SCORED
        record["all"] = _pct(s["regret_at_1_mean"])
        record["OOM picks"] = _pct(s["false_feasible_pick_rate"])
        record["MAPE"] = _pct(s["mape"])
        records.append(record)
    return pd.DataFrame(records)


def regret_curve(result: BenchmarkResult) -> pd.DataFrame:
    """Regret@1 mean against the number of probes K, per simulator and probe protocol."""
    records = [
        {
            "simulator": _simulator_of(name),
            "protocol": s["protocol"],
            "K": int(s["probes"]),
            "regret_at_1_mean": s["regret_at_1_mean"],
            "false_feasible_pick_rate": s["false_feasible_pick_rate"],
            "mape": s["mape"],
        }
        for name, s in result.summaries.items()
        if s.get("probes")
    ]
    columns = [
        "simulator",
        "protocol",
        "K",
        "regret_at_1_mean",
        "false_feasible_pick_rate",
        "mape",
    ]
    return pd.DataFrame(records, columns=columns)


def curve_table(result: BenchmarkResult) -> pd.DataFrame:
    """The regret curve as a table: one row per K, one column per simulator and protocol."""
    curve = regret_curve(result)
    if curve.empty:
        return curve
    curve = curve.assign(
        column=[curve_label(*pair) for pair in curve[["simulator", "protocol"]].to_numpy()]
    )
    table = curve.pivot(index="K", columns="column", values="regret_at_1_mean")
    return table.map(_pct).reset_index()
