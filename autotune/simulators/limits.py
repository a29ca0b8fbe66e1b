"""Bounds on the numbers a job, a device or a measurement can hold, far beyond any real run.

A typo, a unit slip or an overflow (1e30 layers, 1e9 nodes, an infinite memory, a step time in
milliseconds, a peak of 1e-9 TFLOPS) is refused where the value enters (the specs'
``__post_init__``, a measurement file's column, a calibration, a command's config) instead of
reaching a simulator, where it would hang a loop or print ``Infinity``. Every bound is written
once, here, with its reason.
"""

from __future__ import annotations

__all__ = [
    "MAX_BATCH",
    "MAX_CALIBRATION_SCALE",
    "MAX_MEASURED_OVER_PREDICTED",
    "MAX_CONSTANT",
    "MAX_DEVICES",
    "MAX_EXPERTS",
    "MAX_GBPS",
    "MAX_LATENCY_US",
    "MAX_LAYERS",
    "MAX_MEMORY_GIB",
    "MAX_NAME_LENGTH",
    "MAX_NORM_EPSILON",
    "MAX_ROTARY_BASE",
    "MAX_SCALE_FACTOR",
    "MAX_SEED",
    "MAX_SEQ_LEN",
    "MAX_SM_COUNT",
    "MAX_STEP_S",
    "MAX_TFLOPS",
    "MAX_TOKENS_PER_S",
    "MAX_VOCAB",
    "MAX_WIDTH",
    "MEMORY_SLACK",
    "MIN_EFFICIENCY",
    "MIN_GBPS",
    "MIN_MEMORY_GBPS",
    "MIN_MEMORY_GIB",
    "MIN_OP_S",
    "MIN_STEP_S",
    "MIN_TFLOPS",
    "REPEAT_TOLERANCE",
    "THROUGHPUT_TOLERANCE",
]

MAX_LAYERS = 10_000  # layers: the deepest published LLMs have a few hundred (GPT-3: 96)
MAX_WIDTH = 1_048_576  # hidden, FFN, head and LoRA sizes, head counts: the widest are ~1e5
MAX_VOCAB = 10_000_000  # vocabulary: the largest published ones have about 256k tokens
MAX_EXPERTS = 1_048_576  # routed experts and top-k: PEER (2024) routes to a million experts
MAX_DEVICES = 1_048_576  # devices, parallel degrees: the largest clusters have ~2e5 GPUs
MAX_SEQ_LEN = 100_000_000  # tokens per sequence: the longest trained contexts are ~1e7
MAX_BATCH = 100_000_000  # sequences per step or micro-batch: published batches are < 1e5
# A norm's epsilon guards its division: published ones are 1.5625e-07 (GLM-4) to 1e-05, so 0.1
# is a typo (a share, a learning rate).
MAX_NORM_EPSILON = 0.1
# RoPE's base (rope_theta): published ones are 1e4 to 5e7 (InternLM2.5), and Megatron-LM takes an
# integer; 1e12 is a typo or an overflow.
MAX_ROTARY_BASE = 1_000_000_000_000
# Factors of a model card's RoPE scaling and MoE router (YaRN's factor, betas and mscales, the
# routed scaling factor): published ones are 0.707 to 64, so 1e4 is a typo.
MAX_SCALE_FACTOR = 10_000.0
# Seconds per measured (or peer-predicted) training step. A step runs a forward and backward
# of at least one layer, hundreds of kernels of several microseconds each, and an optimizer
# step: under a millisecond is a time in milliseconds or microseconds written as seconds
# (the shipped rows: 0.058 to 329 s). A day for one step is weeks for a hundred: no run does.
MIN_STEP_S = 1e-3
MAX_STEP_S = 86_400.0
# Seconds per call of one operator in a profiled cost table (autotune.profile): a call through
# PyTorch's dispatcher takes a microsecond or more, and the profiler writes microseconds with
# three decimals, so it writes no less than a nanosecond (a clock cycle or two of any device);
# zero, a negative time or 1e-300 is no measurement. At most, a call is part of one step
# (MAX_STEP_S).
MIN_OP_S = 1e-9
MAX_MEMORY_GIB = 1e5  # GiB per device: the largest device memory today is 288 GB of HBM
# A device with less memory trains no LLM (a T4 has 16 GB): 0.08 is a size in TiB or a typo.
MIN_MEMORY_GIB = 1.0
MAX_GBPS = 1e6  # GB/s per device and direction (links and HBM): NVLink 5 gives 900, HBM3e 8e3
# A link slower than 1 Gbit Ethernet (0.125 GB/s) carries no training run: below is a typo or
# a figure in other units.
MIN_GBPS = 0.1
# Device memory (HBM, GDDR) of any accelerator gives hundreds of GB/s (a T4: 320): 8.0 for
# HBM3e's 8 TB/s is a figure in TB/s.
MIN_MEMORY_GBPS = 10.0
MAX_TOKENS_PER_S = 1e9  # tokens/s per device: a small model on one GPU reaches ~1e6
# Dense TFLOP/s per device and data type (0: none, as bf16 on a V100): the slowest device a
# model is trained on gives more than 1 (a V100: 15.7 in FP32), so below is GFLOP/s or FLOP/s;
# 100 PFLOP/s is twenty times a B200's 4.5e3 in FP8.
MIN_TFLOPS = 1.0
MAX_TFLOPS = 1e5
# An achievable fraction of a peak (GEMMs, memory, collectives): measured ones are 0.3 to
# 0.95; below 1% is a percentage written as a fraction of a hundred (0.5 for 50%) or a typo.
MIN_EFFICIENCY = 0.01
# A calibration's scale factor (autotune.calibrate fits them within [1/10, 10]): a factor
# beyond 100 either way is a failed fit or a hand-edited typo, not a correction.
MAX_CALIBRATION_SCALE = 100.0
# A measured step time against the simulator's prediction of it, before calibration (the
# probe loop's measured= rows, python -m autotune.calibrate): on the shipped rows the analytical
# simulator's measured / predicted is 0.71 to 3.3 (the benchmark's predictions.csv), so 30
# times away is a unit slip (a time in milliseconds is 1,000 times) or a row of another job.
# The benchmark does not ask this: the simulator it scores must not veto its ground truth.
MAX_MEASURED_OVER_PREDICTED = 30.0
# Two rows of the same job and layout measure one thing: repeated runs differ by a few
# percent (the shipped repeats: at most 4%), more than 10% apart is two setups or a typo.
REPEAT_TOLERANCE = 0.1
# tokens_per_s_per_device against global_batch_size * seq_len / (step_time_s * num_devices):
# one figure twice (the shipped rows agree within 0.5%); apart by more than 10%, one of the
# two is in other units (tokens/s of the whole cluster, a time in milliseconds).
THROUGHPUT_TOLERANCE = 0.1
# A run that fits used at most its device's memory: 5% above is GB written as GiB (7%
# apart) at the edge, more is a peak of another device or a typo.
MEMORY_SLACK = 0.05
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
