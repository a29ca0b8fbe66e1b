"""The hierarchical simulator: PyTorch layers -> operator graph -> timelines -> schedule.

Importing this package does not import torch; the compile stage loads it on first use.
"""

from __future__ import annotations

from autotune.simulators.hierarchical.simulator import HierarchicalSimulator

__all__ = ["HierarchicalSimulator"]
