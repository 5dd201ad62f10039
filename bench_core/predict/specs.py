"""GPU spec sheets for prediction, read from the one spec-sheet table (bench_core/data/gpu_peaks.csv,
which MFU reads too): dense peaks per precision, memory bandwidth and size, interconnect, power,
each figure with its source.
"""
from __future__ import annotations

import csv
import difflib
import functools
import importlib.resources
import re
from dataclasses import dataclass, field

from bench_core.errors import ConfigError
from bench_core.measure.peaks import NO_UNITS, PEAK_CLASS, PEAK_QUANTITIES, UNPUBLISHED, gpu_spec_table

# What a prediction needs beyond the peaks; a GPU without them is not predictable.
REQUIRED = ("memory_gbps", "memory_gb", "link_gbps")


def data_rows(name: str) -> list[dict]:
    """The rows of a shipped table, bench_core/data/<name> (lines starting with # are its notes)."""
    path = importlib.resources.files("bench_core") / "data" / name
    with importlib.resources.as_file(path) as p, open(p, newline="") as handle:
        return list(csv.DictReader(line for line in handle if line.strip() and not line.startswith("#")))


@dataclass(frozen=True)
class Spec:
    gpu: str                       # short name (`bench predict --gpu`)
    pattern: str                   # regex of torch's device name
    values: dict = field(hash=False)    # quantity -> float, or the text `none` / `unpublished`
    sources: dict = field(hash=False)   # quantity -> datasheet text and URL

    def number(self, quantity: str) -> float | None:
        value = self.values.get(quantity)
        return value if isinstance(value, float) else None

    def peak(self, math: str) -> tuple[float, str]:
        """Dense TFLOP/s of a math class (fp32, tf32, fp16, bf16, fp8) and its source. A class the
        GPU has no tensor cores for runs through fp32 math (bf16 before Ampere): the fp32 peak."""
        own = self.number(math)
        if own is not None:
            return own, f"{math} {own:g} TFLOP/s: {self.sources[math]}"
        fp32 = self.number("fp32")
        why = self.sources.get(math, f"no {math} figure")
        return fp32, f"fp32 {fp32:g} TFLOP/s (no {math} units: {why})"

    def has_tensor(self, math: str) -> bool:
        return self.number(math) is not None

    def predictable(self) -> bool:
        return all(self.number(q) for q in REQUIRED) and self.number("fp32") is not None


@functools.cache
def specs() -> tuple[Spec, ...]:
    """Every GPU of the table, in table order (specific patterns before generic fallbacks)."""
    by_gpu: dict[str, Spec] = {}
    for row in gpu_spec_table():
        spec = by_gpu.setdefault(row["gpu"], Spec(row["gpu"], row["gpu_pattern"], {}, {}))
        value = row["value"]
        spec.values[row["quantity"]] = value if value in (NO_UNITS, UNPUBLISHED) else float(value)
        spec.sources[row["quantity"]] = row["source"]
    return tuple(by_gpu.values())


def predictable_names() -> list[str]:
    return [s.gpu for s in specs() if s.predictable()]


def names_with(required: tuple[str, ...]) -> list[str]:
    """The GPUs whose sheet has every quantity of `required` (REQUIRED: the predictable ones)."""
    return predictable_names() if required == REQUIRED else [s.gpu for s in specs() if
                                                              all(s.number(q) for q in required)]


def spec(name: str, field_name: str = "gpu", required: tuple[str, ...] = REQUIRED) -> Spec:
    """The spec sheet of a GPU by short name (case-insensitive) that has the `required` quantities (a
    prediction's by default; `bench memory` needs only memory_gb); bad input names the allowed ones."""
    for s in specs():
        if s.gpu.lower() == name.strip().lower():
            missing = [q for q in required if not s.number(q)]
            if missing or (required == REQUIRED and not s.predictable()):
                raise ConfigError(field_name, f"{s.gpu} has no {', '.join(missing or ['fp32'])} in gpu_peaks.csv; "
                                              f"allowed: {', '.join(names_with(required))}")
            return s
    names = names_with(required)
    guesses = [n for n in names if name.strip().lower() in n.lower()] or \
        difflib.get_close_matches(name.strip(), names, n=2, cutoff=0.5)
    hint = f" (did you mean {' or '.join(guesses[:3])}?)" if name.strip() and guesses else ""
    raise ConfigError(field_name, f"unknown GPU '{name}'{hint}; allowed: {', '.join(names)}")


# The GPUs a person compares today: what the report predicts (its Predicted GPUs and cost frontier) unless
# the user names others (`bench report --predict-gpus`, a sweep file's `predict_gpus`). One per generation
# and class of the data-centre GPUs rented by the hour (each has an on-demand price in gpu_prices.csv):
# L4 (Ada, inference), A100 80 GB (Ampere), H100 SXM and H200 (Hopper: the pair notebook-bench measures),
# B200 (Blackwell).
COMPARED_TODAY = ("L4", "A100-SXM4-80GB", "H100-SXM5-80GB", "H200-SXM-141GB", "B200")


def gpu_list(value, field_name: str = "predict_gpus") -> tuple[str, ...]:
    """GPU names as a sweep file (a list) or a flag (`A,B`: text separated by commas) gives them, each
    checked as `bench predict --gpu` checks it (exit 2 naming the field); nothing given: COMPARED_TODAY."""
    items = ([] if value is None else value.split(",") if isinstance(value, str)
             else list(value) if isinstance(value, (list, tuple)) else [None])
    if not all(isinstance(item, str) for item in items):
        raise ConfigError(field_name, f"must be a list of GPU names, got {value!r}; allowed: "
                                      f"{', '.join(predictable_names())}")
    names = [item.strip() for item in items if item.strip()]
    return tuple(dict.fromkeys(spec(name, field_name).gpu for name in names)) or COMPARED_TODAY


def spec_for_device(device_name: str) -> Spec | None:
    """The spec sheet whose pattern matches torch's device name, or None (a CPU, an unlisted GPU)."""
    for s in specs():
        if re.fullmatch(s.pattern, (device_name or "").strip(), re.IGNORECASE):
            return s
    return None


def math_class(precision: str, gpu: Spec, fp32_means_tf32: bool = False) -> str:
    """The peak a precision computes at on `gpu`: its own class (amp-fp16 -> fp16, ...), and for
    fp32 the TF32 class where the software runs fp32 convolutions and matmuls as TF32 (NGC
    containers; cuDNN's default allow_tf32 for convolutions) and the GPU has TF32 units."""
    cls = PEAK_CLASS.get(precision, precision)
    if cls == "fp32" and fp32_means_tf32 and gpu.has_tensor("tf32"):
        return "tf32"
    return cls if cls in PEAK_QUANTITIES else "fp32"
