"""The service: command-line entry points, the layout search, MLflow tracking, reports and the
regret benchmark. Run ``python -m autotune model=llama70b cluster=ascend``."""

import sys

# ``python -m autotune...`` imports this package first, while ``sys.argv[0]`` is still "-m"
# (the documented value while the module is located): a command's signals are honoured from
# there, through seconds of imports, to its exit (autotune/_signals.py). An import of the
# package from other code changes nothing.
if sys.argv[:1] == ["-m"]:
    from autotune._signals import exit_on_signals

    exit_on_signals()
