"""The service: command-line entry points, the layout search, MLflow tracking, reports and the
regret benchmark. Run ``python -m autotune model=llama70b cluster=ascend``."""
