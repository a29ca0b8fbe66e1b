"""What the probe protocol gains over its baselines, per K, per source and pooled.

For each simulator and K of the probe protocol, on the scenarios that both score: the mean
regret@1 of the calibrated pick (``<simulator>, probe K=<k>``), of the top-K probes baseline
(``<simulator>, top-<k> probes``: the K best predicted measured, the best kept) and of the
random-probes baseline (``random probes K=<k>``: the exact expectation of the best of K layouts
drawn at random), and the gain over each, ``baseline regret - calibrated regret`` (positive:
the calibrated pick is better), with a 95% interval from a paired bootstrap over the
scenarios (each resample draws scenarios with replacement and keeps each scenario's pair).

Beside them, whether the stop rule keeps its word: the loop stops before K probes only when
the chance that an unmeasured layout fits and beats the best measured by more than
``stop_gain`` is at most ``stop_probability`` (:mod:`autotune.calibrate._probe`). Of the
scenarios where it stopped early, the table counts those whose pick is beaten by more than
``stop_gain`` (regret@1 above ``stop_gain / (1 - stop_gain)``): a share of them well above
``stop_probability`` would say the loop stops on beliefs narrower than its errors.

And what one probe changes: how often the calibrated pick after one probe is another layout
than the top-1 baseline's (the best predicted, measured), and whether it is better or worse.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "ALL",
    "CHANGES_TITLE",
    "CHANGE_COLUMNS",
    "GAINS_TITLE",
    "GAIN_COLUMNS",
    "RANDOM_PROBES",
    "changes_table",
    "gains_table",
    "probe_gains",
]

RANDOM_PROBES = "random probes"
ALL = "all"  # the pooled row: every scenario, each weighing the same
_SAME = 1e-9  # regrets closer than this are the same
GAIN_COLUMNS = [
    "simulator",
    "source",
    "K",
    "scenarios",
    "probes_used",
    "stopped",
    "beaten_after_stop",
    "calibrated",
    "top_k",
    "random",
    "gain_over_top_k",
    "gain_over_top_k_ci_low",
    "gain_over_top_k_ci_high",
    "gain_over_random",
    "gain_over_random_ci_low",
    "gain_over_random_ci_high",
]
CHANGE_COLUMNS = [
    "simulator",
    "source",
    "scenarios",
    "changed",
    "better",
    "worse",
    "same_regret",
    "regret_change_mean",
    "calibrated",
    "top_1",
]


def _interval(
    differences: np.ndarray, rng: np.random.Generator, samples: int
) -> tuple[float, float]:
    """The 95% percentile interval of the mean of ``differences`` over paired resamples."""
    if len(differences) == 0:
        return float("nan"), float("nan")
    means = differences[rng.integers(0, len(differences), (samples, len(differences)))].mean(1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def _regrets(scenarios: pd.DataFrame, ranker: str, column: str) -> pd.DataFrame:
    mine = scenarios[(scenarios["simulator"] == ranker) & scenarios["eligible"].astype(bool)]
    if "probes_used" not in mine:
        mine = mine.assign(probes_used=np.nan)
    kept = ["source", "scenario", "regret_at_1", "pick", "probes_used"]
    renamed = {"regret_at_1": column, "pick": f"{column}_pick", "probes_used": f"{column}_used"}
    return mine[kept].rename(columns=renamed)


def _paired(scenarios: pd.DataFrame, simulator: str, k: int) -> pd.DataFrame:
    """Per scenario scored by all three: the three regrets, picks and probes used."""
    frame = _regrets(scenarios, f"{simulator}, probe K={k}", "calibrated")
    for ranker, column in (
        (f"{simulator}, top-{k} probes", "top_k"),
        (f"{RANDOM_PROBES} K={k}", "random"),
    ):
        frame = frame.merge(_regrets(scenarios, ranker, column), on=["source", "scenario"])
    return frame


def _scopes(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Every scenario pooled, then each source's."""
    return [(ALL, frame)] + [(str(s), g) for s, g in frame.groupby("source", sort=True)]


def _gain_rows(
    simulator: str, k: int, frame: pd.DataFrame, samples: int, seed: int, stop_gain: float
) -> list[dict[str, Any]]:
    rows = []
    for source, part in _scopes(frame):
        stopped = part[part["calibrated_used"] < k]
        record: dict[str, Any] = {
            "simulator": simulator,
            "source": source,
            "K": k,
            "scenarios": len(part),
            "probes_used": float(part["calibrated_used"].mean()) if len(part) else np.nan,
            "stopped": len(stopped),
            "beaten_after_stop": int((stopped["calibrated"] > stop_gain / (1 - stop_gain)).sum()),
        }
        for column in ("calibrated", "top_k", "random"):
            record[column] = float(part[column].mean()) if len(part) else np.nan
        for base in ("top_k", "random"):
            differences = (part[base] - part["calibrated"]).to_numpy(dtype=float)
            low, high = _interval(differences, np.random.default_rng(seed), samples)
            record[f"gain_over_{base}"] = float(differences.mean()) if len(part) else np.nan
            record[f"gain_over_{base}_ci_low"] = low
            record[f"gain_over_{base}_ci_high"] = high
        rows.append(record)
    return rows


def _change_rows(simulator: str, frame: pd.DataFrame) -> list[dict[str, Any]]:
    rows = []
    for source, part in _scopes(frame):
        changed = part[part["calibrated_pick"] != part["top_k_pick"]]
        delta = (changed["calibrated"] - changed["top_k"]).to_numpy(dtype=float)
        rows.append(
            {
                "simulator": simulator,
                "source": source,
                "scenarios": len(part),
                "changed": len(changed),
                "better": int((delta < -_SAME).sum()),
                "worse": int((delta > _SAME).sum()),
                "same_regret": int((np.abs(delta) <= _SAME).sum()),
                "regret_change_mean": float(delta.mean()) if len(delta) else np.nan,
                "calibrated": float(part["calibrated"].mean()) if len(part) else np.nan,
                "top_1": float(part["top_k"].mean()) if len(part) else np.nan,
            }
        )
    return rows


def probe_gains(
    scenarios: pd.DataFrame,
    summaries: Mapping[str, Mapping[str, Any]],
    samples: int,
    seed: int,
    stop_gain: float,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The gains table and the K=1 changes table (module docstring); both empty without a
    probe protocol.

    Args:
        scenarios: the per-scenario records of every ranker (``simulator`` names the ranker).
        summaries: each ranker's summary (``protocol``, ``probes``).
        samples: bootstrap resamples of each interval.
        seed: the seed of every interval's resamples (each drawn afresh from it).
        stop_gain: the probe loop's stop gain (a share): a stopped scenario whose pick is
            beaten by more than it counts against the stop rule.
    """
    gains: list[dict[str, Any]] = []
    changes: list[dict[str, Any]] = []
    for name, summary in summaries.items():
        if summary.get("protocol") != "probe":
            continue
        simulator, k = name.split(",")[0], int(summary["probes"])
        frame = _paired(scenarios, simulator, k)
        gains += _gain_rows(simulator, k, frame, samples, seed, stop_gain)
        if k == 1:
            changes += _change_rows(simulator, frame)
    return (
        pd.DataFrame(gains, columns=GAIN_COLUMNS),
        pd.DataFrame(changes, columns=CHANGE_COLUMNS),
    )


def _pct(value: float) -> str:
    return "-" if not np.isfinite(value) else f"{100 * value:.1f}%"


def _gain(value: float, low: float, high: float) -> str:
    """A gain in percentage points with its interval: ``+1.2 [+0.3, +2.0]``."""
    if not np.isfinite(value):
        return "-"
    return f"{100 * value:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"


def gains_table(gains: pd.DataFrame) -> pd.DataFrame:
    """The gains, formatted: one row per simulator, K and source (``all``: pooled)."""
    records = [
        {
            "simulator": row.simulator,
            "K": row.K,
            "source": row.source,
            "scenarios": row.scenarios,
            "probes used": "-" if not np.isfinite(row.probes_used) else f"{row.probes_used:.2f}",
            "stopped early (pick beaten)": f"{row.stopped} ({row.beaten_after_stop})",
            "calibrated": _pct(row.calibrated),
            "top-K": _pct(row.top_k),
            "random K": _pct(row.random),
            "gain over top-K, pp [95% CI]": _gain(
                row.gain_over_top_k, row.gain_over_top_k_ci_low, row.gain_over_top_k_ci_high
            ),
            "gain over random K, pp [95% CI]": _gain(
                row.gain_over_random, row.gain_over_random_ci_low, row.gain_over_random_ci_high
            ),
        }
        for row in gains.itertuples(index=False)
    ]
    return pd.DataFrame(records)


def changes_table(changes: pd.DataFrame) -> pd.DataFrame:
    """What one probe changes, formatted: one row per simulator and source (``all``)."""
    records = [
        {
            "simulator": row.simulator,
            "source": row.source,
            "scenarios": row.scenarios,
            "pick changed": row.changed,
            "better": row.better,
            "worse": row.worse,
            "same regret": row.same_regret,
            "regret change where changed, pp": "-"
            if not np.isfinite(row.regret_change_mean)
            else f"{100 * row.regret_change_mean:+.1f}",
            "regret@1 K=1": _pct(row.calibrated),
            "top-1": _pct(row.top_1),
        }
        for row in changes.itertuples(index=False)
    ]
    return pd.DataFrame(records)


GAINS_TITLE = (
    "Gain of the calibrated pick over the probe baselines: regret@1 mean of each, and the "
    "baseline's minus the calibrated one in percentage points (positive: the calibrated pick is "
    "better), with a 95% interval from a paired bootstrap over the scenarios; the scenarios "
    "where the loop stopped before K probes, and in brackets those of them whose pick another "
    "layout beats by more than the stop gain, a chance the stop rule puts at "
    "calibrate.stop_probability at most"
)
CHANGES_TITLE = (
    "What one probe changes: scenarios where the pick after one probe is another layout than "
    "the top-1 baseline's (the best predicted, measured), and whether it is better or worse"
)
