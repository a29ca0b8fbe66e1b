"""Upper bounds on the numbers a job can hold, far beyond any real training run.

A typo, a unit slip or an overflow (1e30 layers, 1e9 nodes, an infinite memory) is refused
where the value enters (the specs' ``__post_init__``, a measurement file's column, a command's
config) instead of reaching a simulator, where it would hang a loop or print ``Infinity``.
Every bound is written once, here, with its reason.
"""

from __future__ import annotations

__all__ = [
    "MAX_BATCH",
    "MAX_CONSTANT",
    "MAX_DEVICES",
    "MAX_EXPERTS",
    "MAX_GBPS",
    "MAX_LATENCY_US",
    "MAX_LAYERS",
    "MAX_MEMORY_GIB",
    "MAX_NAME_LENGTH",
    "MAX_SEED",
    "MAX_SEQ_LEN",
    "MAX_SM_COUNT",
    "MAX_STEP_S",
    "MAX_TFLOPS",
    "MAX_TOKENS_PER_S",
    "MAX_VOCAB",
    "MAX_WIDTH",
]

MAX_LAYERS = 10_000  # layers: the deepest published LLMs have a few hundred (GPT-3: 96)
MAX_WIDTH = 1_048_576  # hidden, FFN, head and LoRA sizes, head counts: the widest are ~1e5
MAX_VOCAB = 10_000_000  # vocabulary: the largest published ones have about 256k tokens
MAX_EXPERTS = 1_048_576  # routed experts and top-k: PEER (2024) routes to a million experts
MAX_DEVICES = 1_048_576  # devices, parallel degrees: the largest clusters have ~2e5 GPUs
MAX_SEQ_LEN = 100_000_000  # tokens per sequence: the longest trained contexts are ~1e7
MAX_BATCH = 100_000_000  # sequences per step or micro-batch: published batches are < 1e5
MAX_STEP_S = 1e7  # seconds per step: 1e7 s is 116 days for one optimizer step
MAX_MEMORY_GIB = 1e5  # GiB per device: the largest device memory today is 288 GB of HBM
MAX_GBPS = 1e6  # GB/s per device and direction (links and HBM): NVLink 5 gives 900, HBM3e 8e3
MAX_TOKENS_PER_S = 1e9  # tokens/s per device: a small model on one GPU reaches ~1e6
MAX_TFLOPS = 1e6  # dense TFLOP/s per device: a B200 gives 4.5e3 in FP8
MAX_SM_COUNT = 100_000  # streaming multiprocessors (AI cores) per device: a B200 has 148
MAX_LATENCY_US = 1e7  # microseconds per collective call: 10 s, a timeout rather than a latency
# A simulator's or a framework's constant (a time, a byte count, a factor): 1e15 keeps every
# product of constants and job sizes finite, and no constant comes near it (the largest,
# a gradient bucket, is 4e7 parameters).
MAX_CONSTANT = 1e15
MAX_SEED = 2**32 - 1  # the seeds of Optuna's samplers and of numpy's RandomState
# Characters in a name a user gives (model, cluster, calibration, study, experiment): a name
# becomes a file name (<name>.yaml; file systems take 255 bytes) and the default study name
# joins two of them (Optuna keeps 512 characters); the longest shipped name has 16.
MAX_NAME_LENGTH = 64
