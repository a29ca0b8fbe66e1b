"""Launch the pick: ready-to-run launch files for a layout, one writer per framework.

:func:`write_launch_files` writes what the job's framework (``conf/framework/``) needs:
Megatron-LM and MindSpeed-LLM get a torchrun script of ``pretrain_gpt.py``, Megatron-DeepSpeed
a script and its ``ds_config.json``, and a Megatron-Core job also a NeMo 2.0 recipe override.
Every option comes from the layout, the model (its card facts included: positions, norm
epsilon, QK norms, router; :mod:`autotune.simulators.model_card`) and the training settings; which
overlaps run is a fact of the framework (docs/reference.md 7). What a framework cannot be told
is said in the file's header. Each file is written for the framework's release
(``framework.release``, named in its header) and holds only options that release accepts.
:func:`layout_flags` gives the options the layout sets, for the terminal report.
"""

from __future__ import annotations

from autotune.launch._write import LaunchFlags
from autotune.launch._write import layout_flags
from autotune.launch._write import write_launch_files

__all__ = ["LaunchFlags", "layout_flags", "write_launch_files"]
