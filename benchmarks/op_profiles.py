"""Count the op tables of the published workloads, for bench_core/data/workload_ops.csv (`bench predict`'s
per-operation model of the published pairs): each workload's step at the exact batch a published row ran
(or the batch bench_core/predict/published.py infers for it) run on fake tensors (torch's FakeTensorMode:
shapes and dtypes, no arithmetic), under bench_core/measure/op_counts.py's recorder, with CUDA's autocast
lists (run/autocast_rules.py) and torch's multi-tensor SGD, as a GPU step runs. Nothing is timed.

    PYTHONPATH=. .venv/bin/python benchmarks/op_profiles.py > bench_core/data/workload_ops.csv
    PYTHONPATH=. .venv/bin/python benchmarks/op_profiles.py --only resnet50   # a subset, to stdout

The CSV's `source` says the command and commit. A batch is counted once per workload and precision.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import subprocess
import sys

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from bench_core.config.schema import BenchConfig
from bench_core.measure.op_counts import OpRecorder
from bench_core.measure.op_table import table, to_json
from bench_core.predict.published import batch_of, pairs, profile_key, published_rows, setup_of
from bench_core.run.autocast_rules import AUTOCAST_RULES
from bench_core.run.optimizers import make_optimizer
from bench_core.workload.models import resolve_model
from bench_core.workload.precision import resolve_precision

COLUMNS = ("model", "mode", "input_shape", "precision", "batch", "ops", "source")
PRECISION = {"amp": "amp-fp16", "fp32": "fp32"}  # the profile precision -> bench's precision counted
# The published workloads bench can count: reference.csv's model -> bench's model (timm's stand in for DLE's
# ResNeXt, SE-ResNeXt and EfficientNet under their own names, reference.csv's notes say how they differ).
MODELS = {"resnet50": "resnet50", "bert-large": "bert-large", "bert-base": "bert-base",
          "timm:resnext101_32x4d": "timm:resnext101_32x4d", "timm:seresnext101_32x4d": "timm:seresnext101_32x4d",
          "timm:efficientnet_b0": "timm:efficientnet_b0", "timm:efficientnet_b4": "timm:efficientnet_b4"}


def needed() -> list[tuple]:
    """(model, mode, input_shape, amp | fp32, batch) of every member of a published GPU pair bench can count."""
    rows = published_rows()
    found = set()
    for a, b in pairs():
        for row, partner in ((a, b), (b, a)):
            if row["model"] not in MODELS:
                continue
            batch = batch_of(row, partner, rows)
            if batch:
                key = profile_key(row, setup_of(row, (), None).math)
                found.add((*key, int(round(batch))))
    return sorted(found)


def config(model: str, mode: str, input_shape: str, precision: str, batch: int) -> BenchConfig:
    shape = {}
    if input_shape.endswith("tokens"):
        shape["seq_len"] = int(input_shape.split()[0])
    else:
        _, height, width = (int(x) for x in input_shape.split("x"))
        shape.update(height=height, width=width)
    return BenchConfig.from_dict({"model": MODELS[model], "mode": mode, "precision": PRECISION[precision],
                                  "batch_size": batch, "device": "cpu", **shape})


def count(cfg: BenchConfig) -> str:
    spec = resolve_model(cfg.model)
    task, precision = spec.task, resolve_precision(cfg.precision)
    train = cfg.mode == "train"
    with torch.device("meta"):
        model = spec.build(cfg)
    recorder = OpRecorder()
    with FakeTensorMode(allow_non_fake_inputs=True):
        fake_parameters(model)
        model.train(train)
        workload = task.make_workload(spec, cfg, "cpu", torch.float32)
        optimizer = None
        if train:
            optimizer = make_optimizer(cfg.optimizer, model)
            for group in optimizer.param_groups:
                group["foreach"] = True
            for p in model.parameters():
                p.grad = torch.zeros_like(p)
            optimizer.step()  # the optimizer's state, as every timed step holds it
            optimizer.zero_grad(set_to_none=True)
        call = workload.train_call if train else workload.infer_call
        with recorder:
            with autocast(precision), (contextlib.nullcontext() if train else torch.no_grad()):
                out = call(model)
                loss = workload.loss(out) if train else None
            if train:
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
    FakeTensorMode.cache_clear()
    return to_json(table(recorder.calls), batch=cfg.batch_size)


def fake_parameters(model) -> None:
    """Each meta parameter and buffer as a fake CPU tensor of its shape (tied ones stay one tensor)."""
    made: dict[int, torch.Tensor] = {}
    for module in model.modules():
        for store in (module._parameters, module._buffers):
            for key, t in store.items():
                if t is None:
                    continue
                if id(t) not in made:
                    empty = torch.empty_like(t, device="cpu")
                    made[id(t)] = torch.nn.Parameter(empty, t.requires_grad) if isinstance(t, torch.nn.Parameter) \
                        else empty
                store[key] = made[id(t)]


def autocast(precision):
    if not precision.autocast_dtype:
        return contextlib.nullcontext()
    dtype = getattr(torch, precision.autocast_dtype)
    stack = contextlib.ExitStack()
    stack.enter_context(torch.autocast("cpu", dtype=dtype))
    stack.enter_context(AUTOCAST_RULES["cuda"](dtype))
    return stack


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="count only this model")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    writer = csv.DictWriter(sys.stdout, COLUMNS, lineterminator="\n")
    print("# The op tables of the published workloads (bench_core/measure/op_table.py), counted on fake tensors at "
          "each published batch: benchmarks/op_profiles.py.")
    writer.writeheader()
    for model, mode, input_shape, precision, batch in needed():
        if args.only and model != args.only:
            continue
        cfg = config(model, mode, input_shape, precision, batch)
        print(f"counting {model} {mode} {input_shape} {precision} batch {batch}", file=sys.stderr)
        writer.writerow({"model": model, "mode": mode, "input_shape": input_shape, "precision": precision,
                         "batch": batch, "ops": count(cfg),
                         "source": f"benchmarks/op_profiles.py (fake tensors, {PRECISION[precision]}, CUDA autocast "
                                   f"lists, foreach SGD; commit {commit})"})
        sys.stdout.flush()


if __name__ == "__main__":
    main()
