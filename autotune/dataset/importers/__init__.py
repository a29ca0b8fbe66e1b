"""Importers of the raw published figures (``autotune/dataset/raw/``) into schema v1.

Each importer module reads one raw file (``RAW_FILE``) and returns its schema-v1 table
(``convert``), shipped as ``autotune/dataset/data/<SOURCE>.csv``. What each parses and assumes is
in its docstring and in ``autotune/dataset/data/NOTICE.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pandas as pd

from autotune.dataset.importers import bigscience_tr3m
from autotune.dataset.importers import bloom
from autotune.dataset.importers import dgxc
from autotune.dataset.importers import dlperf
from autotune.dataset.importers import flagperf
from autotune.dataset.importers import korthikanti
from autotune.dataset.importers import megatron_bridge
from autotune.dataset.importers import mindspeed
from autotune.dataset.importers import mindspeed_2026
from autotune.dataset.importers import nemo
from autotune.dataset.importers import simumax
from autotune.dataset.importers import torchtitan
from autotune.dataset.importers import vtrain

__all__ = ["IMPORTERS", "Importer"]

Importer = Callable[[Path], pd.DataFrame]
_MODULES: tuple[ModuleType, ...] = (
    vtrain,
    simumax,
    korthikanti,
    dlperf,
    mindspeed,
    nemo,
    megatron_bridge,
    dgxc,
    mindspeed_2026,
    bloom,
    flagperf,
    bigscience_tr3m,
    torchtitan,
)
# source name -> (raw file name in autotune/dataset/raw, converter)
IMPORTERS: dict[str, tuple[str, Importer]] = {m.SOURCE: (m.RAW_FILE, m.convert) for m in _MODULES}
