"""The groups of predictions: each prediction belongs to one, by what it is predicted from, and carries
the band of that group's measured pairs, or none where no pair of the group was measured.

The published pairs (bench_core/predict/published.py) and our own rows (bench_core/predict/measured.py)
are put in groups by the same rule, so a group's band is the error of pairs like the prediction.
"""
from __future__ import annotations

GPU_TRAINING, INFERENCE, LLM_TRAINING, SMALL_BATCH, CPU_SOURCE = (
    "GPU to GPU in training", "inference", "LLM training", "small batches", "a CPU source")
GROUPS = (GPU_TRAINING, INFERENCE, LLM_TRAINING, SMALL_BATCH, CPU_SOURCE)
# A small step is one the host can bind: its launch floor (the ops it runs x the host's time per op,
# bench_core/predict/model.py) is at least this share of its ideal time on the measured GPU (the roofline
# for its FLOPs and bytes). There the GPU's peaks say little of the step's time, in training and inference
# alike, so such steps are a group of their own whatever the mode. Where the ops were not counted (older
# rows), a batch below SMALL_BATCH_BELOW stands for it.
SMALL_STEP_FLOOR_SHARE = 0.25
SMALL_BATCH_BELOW = 32
LLM_TASKS = ("causal-lm",)
# What puts a row in each group, in words: what docs/prediction.md and `bench predict --help` say (both
# generated from this, bench_core/predict/tables.py), beside the pairs each group holds.
RULES = {
    GPU_TRAINING: "a GPU row in train mode, not an LLM, whose step is not small",
    INFERENCE: "a GPU row in infer or generate mode whose step is not small",
    LLM_TRAINING: "a GPU row of a causal LM in train mode",
    SMALL_BATCH: (f"any GPU row whose step is small: its launch floor is {SMALL_STEP_FLOOR_SHARE * 100:.0f} % or more of its "
                  f"ideal time on the measured GPU (where the ops were not counted: a batch below {SMALL_BATCH_BELOW})"),
    CPU_SOURCE: "any CPU row: no prediction, the GPU's roofline bound for the FLOPs and bytes the run counted ('at most')",
}


def group_of(device_type: str | None, mode: str | None, task: str | None, batch_size,
             floor_share: float | None = None) -> str:
    """Which group's measured pairs (if any) stand behind a prediction from a row of this kind.
    floor_share: the step's launch floor over its ideal time on the measured GPU (None: not counted)."""
    if device_type != "cuda":
        return CPU_SOURCE
    if mode == "train" and task in LLM_TASKS:
        return LLM_TRAINING
    if floor_share is not None:
        small = floor_share >= SMALL_STEP_FLOOR_SHARE
    else:
        small = isinstance(batch_size, (int, float)) and batch_size < SMALL_BATCH_BELOW
    if small:
        return SMALL_BATCH
    if mode != "train":
        return INFERENCE
    return GPU_TRAINING
