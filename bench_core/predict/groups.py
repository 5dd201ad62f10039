"""The groups of predictions: each prediction belongs to one, by what it is predicted from, and carries
the band of that group's measured pairs, or none where no pair of the group was measured.

The published pairs (bench_core/predict/published.py) and our own rows (bench_core/predict/measured.py)
are put in groups by the same rule, so a group's band is the error of pairs like the prediction.
"""
from __future__ import annotations

GPU_TRAINING, INFERENCE, LLM_TRAINING, SMALL_BATCH, CPU_SOURCE = (
    "GPU to GPU in training", "inference", "LLM training", "small batches", "a CPU source")
GROUPS = (GPU_TRAINING, INFERENCE, LLM_TRAINING, SMALL_BATCH, CPU_SOURCE)
# Below this batch per device a step is launch- and host-bound on a GPU (a few microseconds of
# kernels, tens of microseconds of Python and dispatch per op): the model has no term for it, and
# the published pairs ran at batches of 64 and more (lambdal's ResNet-50, MLPerf's BERT).
SMALL_BATCH_BELOW = 32
LLM_TASKS = ("causal-lm",)


def group_of(device_type: str | None, mode: str | None, task: str | None, batch_size) -> str:
    """Which group's measured pairs (if any) stand behind a prediction from a row of this kind."""
    if device_type != "cuda":
        return CPU_SOURCE
    if mode != "train":
        return INFERENCE
    if task in LLM_TASKS:
        return LLM_TRAINING
    if isinstance(batch_size, int) and batch_size < SMALL_BATCH_BELOW:
        return SMALL_BATCH
    return GPU_TRAINING
