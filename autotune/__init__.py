"""Pick the parallel layout of LLM training without the cluster.

The simulators (:mod:`autotune.simulators`), the config tree's reader (:mod:`autotune.catalog`)
and the measured data (:mod:`autotune.dataset`) are the base; on them, the service: the
commands, the layout search, MLflow tracking, reports, calibration and the regret benchmark.
Run ``python -m autotune model=llama70b cluster=ascend`` (installed: ``autotune ...``)."""

import sys

# ``python -m autotune...`` imports this package first, while ``sys.argv[0]`` is still "-m"
# (the documented value while the module is located): a command's signals are honoured from
# there, through seconds of imports, to its exit (autotune/_signals.py). An import of the
# package from other code changes nothing.
if sys.argv[:1] == ["-m"]:
    from autotune._signals import exit_on_signals

    exit_on_signals()
