"""SimuMax B200 release v1.2 (MooreThreads/SimuMax): Megatron-LM + TransformerEngine on 8 B200.

Parsed: the ``model`` cell (``llama3-70b (truncated to 12 layers)``) names the catalog model and
its layer count; ``other_knobs`` gives ``distributed_optimizer``. Each configuration carries
measured step time and peak allocated memory, and SimuMax's own prediction (kept as the peer
``predictor=simumax``). Assumed (NOTICE.md): recompute none (the launcher passes
``--recompute-num-layers 0``); no data-parallel overlap (its launchers
``simu_tools/megatron_scripts/scripts/run_pretrain_{llama3,deepseekv2}.sh`` pass neither
``--overlap-grad-reduce`` nor ``--overlap-param-gather``); sequence parallelism as stated,
which Megatron turns off at tp=1; the truncated DeepSeek proxies keep one dense first layer (the
release notes say so for V3; V2 has one); no multi-token prediction layer.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from autotune.dataset.importers._common import catalog_architecture
from autotune.dataset.importers._common import configs
from autotune.dataset.importers._common import knobs
from autotune.dataset.importers._common import metric
from autotune.dataset.importers._common import order_columns
from autotune.dataset.importers._common import provenance

__all__ = ["RAW_FILE", "SOURCE", "convert"]

SOURCE = "simumax"
RAW_FILE = "simumax_b200.csv"
_MODELS = {
    "llama3-70b": "llama3_70b",
    "llama3-405b": "llama3_405b",
    "deepseekv2": "deepseek_v2",
    "deepseekv3": "deepseek_v3",
}
_TRUNCATED = re.compile(r"^(?P<name>\S+) \(truncated to (?P<layers>\d+) layers\)$")
_PROXY_FIRST_DENSE_LAYERS = (
    1  # b200_release_v1.2_summary.md: "DeepSeekV3 formal rows use dense_layers=1"
)


def convert(path: Path) -> pd.DataFrame:
    """Schema-v1 rows of ``simumax_b200.csv``: measured time, memory and SimuMax's prediction."""
    records = []
    for config in configs(path):
        row = config.row
        match = _TRUNCATED.match(row["model"])
        if not match or not row["recompute"].startswith("none"):
            raise ValueError(f"{path}: unexpected model or recompute in {row['config_id']}")
        layers = int(match["layers"])
        architecture = catalog_architecture(_MODELS[match["name"]], num_layers=layers)
        if architecture["num_experts"]:
            architecture["first_dense_layers"] = _PROXY_FIRST_DENSE_LAYERS
        tp = int(row["tp"])
        records.append(
            {
                "scenario": row["sweep_group"],
                "model": row["model"],
                **architecture,
                "cluster": "b200",
                "num_devices": int(row["num_devices"]),
                "seq_len": int(row["seq_len"]),
                "global_batch_size": int(row["global_batch"]),
                **{k: int(row[k]) for k in ("dp", "tp", "pp", "cp", "ep", "vpp")},
                "micro_batch": int(row["micro_batch"]),
                "recompute": "none",
                "sequence_parallel": row["seq_parallel"] == "yes" and tp > 1,
                "distributed_optimizer": "distributed_optimizer" in knobs(row["other_knobs"]),
                "precision": "bf16",
                "framework": "megatron_core",
                # The launchers pass neither --overlap-grad-reduce nor --overlap-param-gather.
                "overlap_grad_reduce": False,
                "overlap_param_gather": False,
                # run_pretrain_{llama3,deepseekv2}.sh: CP_COMM_TYPE=${CP_COMM_TYPE:-a2a}
                "cp_comm_type": "a2a" if int(row["cp"]) > 1 else None,
                "status": row["status"],
                "step_time_s": metric(config, "iteration_time_measured", "ms") / 1000.0,
                "peak_memory_gib": metric(config, "peak_alloc_measured", "GiB"),
                "peak_memory_measure": "allocated",  # max over ranks of max_memory_allocated
                "predictor": "simumax",
                "predicted_step_time_s": (
                    metric(config, "iteration_time_simumax_predicted", "ms") / 1000.0
                ),
                **provenance(config, SOURCE),
                "notes": row["other_knobs"],
            }
        )
    return order_columns(records)
