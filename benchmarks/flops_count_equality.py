"""The FLOP count (measure/flops.count_flops) against the implementation it replaced, on every family.

The old one, copied here as it was (FlopCounterMode entered, with its module tracker, over a mode that
records attention kernels and bytes), and the package's one count the same step of each configuration:
FLOPs, attention kernels and both byte totals must be equal. Each count runs in a fresh run_benchmark of
the same seed (a training step changes the weights, and Mask R-CNN's proposals follow them), as the
runner's second step; plus a few steps counted directly (a meta-device model, SDPA's math path).

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/flops_count_equality.py [--quick]
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench_core import BenchConfig, run_benchmark
from bench_core.measure import flops
from bench_core.measure.flops import ATTENTION_KERNELS, Counted
from bench_core.workload.models import REGISTRY, model_table


# -- the implementation before flops-lite (bench_core/measure/flops.py at 69b8c54), verbatim --------

def old_count_flops(step) -> Counted:
    """FLOPs of one call of `step`, and which fused attention kernels it ran."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode
    aten = torch.ops.aten
    fixes = {aten.convolution_backward: _conv_backward_flop,
             # torch (2.14) has no formula for the CPU flash kernel: attention would count as 0 there
             aten._scaled_dot_product_flash_attention_for_cpu: _attention_flop,
             aten._scaled_dot_product_flash_attention_for_cpu_backward: _attention_backward_flop}
    from torch.utils._pytree import tree_leaves
    from torch.utils.flop_counter import flop_registry
    seen: set[str] = set()
    moved = {True: 0, False: 0}  # op counts FLOPs -> bytes its inputs and outputs take

    class Kernels(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func._overloadpacket.__name__
            if name in ATTENTION_KERNELS:
                seen.add(ATTENTION_KERNELS[name])
            out = func(*args, **(kwargs or {}))
            if not func.is_view:
                packet = func._overloadpacket
                moved[packet in flop_registry or func in fixes] += sum(
                    x.numel() * x.element_size() for x in tree_leaves((args, kwargs, out)) if isinstance(x, torch.Tensor))
            return out

    # Below the counter: it decomposes composite ops (SDPA under inference_mode) into the kernels seen here.
    with Kernels(), FlopCounterMode(display=False, custom_mapping=fixes) as counter:
        step()
    return Counted(counter.get_total_flops() or None, tuple(sorted(seen)), moved[True], moved[False])


def _attention_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    from torch.utils.flop_counter import sdpa_flop_count
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _attention_backward_flop(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None,
                             **kwargs) -> int:
    from torch.utils.flop_counter import sdpa_backward_flop_count
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def _conv_backward_flop(grad_out_shape, x_shape, w_shape, _bias, _stride, _padding, _dilation, transposed,
                        _output_padding, groups, output_mask, out_shape=None, **kwargs) -> int:
    from torch.utils.flop_counter import conv_flop_count

    def t(shape):
        return [shape[1], shape[0]] + list(shape[2:])
    flop = 0
    if output_mask[0]:
        flop += conv_flop_count(grad_out_shape, w_shape, out_shape[0], not transposed)
    if output_mask[1]:
        if transposed:
            flop += conv_flop_count(t(grad_out_shape), t(x_shape), t(out_shape[1]), transposed=False) // groups
        else:
            flop += conv_flop_count(t(x_shape), t(grad_out_shape), t(out_shape[1]), transposed=False) // groups
    return flop


# -- the configurations ---------------------------------------------------------------------------

ONE_STEP = dict(steps=1, warmup_steps=0, repeats=1, min_seconds=0, device="cpu", batch_size=2)
# tests/test_models.py SMALL: the smallest sizes the detection and 3D models take
SMALL = {"ssd300_vgg16": dict(width=300, height=300, batch_size=1),
         "fasterrcnn_resnet50_fpn_v2": dict(width=64, height=64, batch_size=1),
         "maskrcnn_resnet50_fpn_v2": dict(width=64, height=64, batch_size=1),
         "unet3d": dict(width=16, height=16, depth=16)}
# tests/test_text.py's tiny transformers configurations, as hf:<config.json>
HF = {"gpt2": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 1000, "n_positions": 128},
      "bert": {"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
               "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 64},
      "t5": {"model_type": "t5", "d_model": 64, "d_ff": 128, "d_kv": 16, "num_layers": 2, "num_decoder_layers": 2,
             "num_heads": 4, "vocab_size": 1000}}
GENERATE = dict(prompt_len=16, new_tokens=4)
REC = dict(num_tables=4, rows_per_table=1000, embedding_dim=16, indices_per_lookup=3, batch_size=8)


def configurations(folder: Path, quick: bool) -> list[dict]:
    vision = [row["name"] for row in model_table() if ":" not in row["name"]
              and "width" in REGISTRY[row["name"]].task.shape_fields]
    found = []
    for name in vision:
        for mode in ("train", "infer"):
            found.append({"model": name, "mode": mode, "width": 32, "height": 32, **SMALL.get(name, {})})
    for name in ("resnet18", "mobilenet_v3_large", "vit_b_16"):
        for precision in ("amp-bf16", "bf16"):
            for mode in ("train", "infer"):
                found.append(dict(model=name, mode=mode, precision=precision, width=32, height=32))
    for mode in ("train", "infer"):
        found.append(dict(model="maskrcnn_resnet50_fpn_v2", mode=mode, precision="amp-bf16",
                          **SMALL["maskrcnn_resnet50_fpn_v2"]))
    for precision in ("fp32", "amp-bf16", "bf16"):
        found += [dict(model="llama-tiny", mode="train", seq_len=16, precision=precision),
                  dict(model="llama-tiny", mode="infer", seq_len=16, precision=precision),
                  dict(model="llama-tiny", mode="generate", precision=precision, **GENERATE),
                  dict(model="whisper-micro", mode="train", seq_len=16, precision=precision),
                  dict(model="whisper-micro", mode="infer", precision=precision),
                  dict(model="whisper-micro", mode="generate", new_tokens=4, precision=precision)]
        for name in ("sd-unet-tiny", "dit-tiny"):
            found += [dict(model=name, mode=mode, latent_size=8, precision=precision) for mode in ("train", "infer")]
        found += [dict(model="dlrm", mode=mode, precision=precision, **REC) for mode in ("train", "infer")]
    found.append(dict(model="dlrm-dcnv2", mode="train", **REC))
    for name, values in HF.items():
        path = folder / f"{name}.json"
        path.write_text(json.dumps(values))
        modes = ("train", "infer") if name == "bert" else ("train", "infer", "generate")
        for precision in ("fp32", "amp-bf16"):
            for mode in modes:
                shape = GENERATE if mode == "generate" else dict(seq_len=16)
                found.append(dict(model=f"hf:{path}", mode=mode, precision=precision, **shape))
    if quick:
        found = [c for c in found if c["model"] in ("resnet18", "mobilenet_v3_large", "llama-tiny", "whisper-micro",
                                                    "sd-unet-tiny", "dlrm")]
    return [{**ONE_STEP, **c} for c in found]


def counted_in_a_run(values: dict, count) -> Counted | str:
    """The Counted of `values`' step as its run counts it with `count`, or why the run did not run."""
    result = []
    real = flops.count_flops

    def counting(step):
        result.append(count(step))
        return result[-1]
    flops.count_flops = counting  # the runner calls flops.count_flops: it finds this one
    try:
        row = run_benchmark(BenchConfig(**values))[0]
    finally:
        flops.count_flops = real
    if not result:
        return f"{row['status']}: {row['message']}"
    return result[0]


def direct_steps():
    """Steps counted outside a run: a meta-device forward (no memory), SDPA on its math path, grouped convs."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from bench_core.workload.models import resolve_model
    cfg = BenchConfig(model="dit-tiny", mode="infer", latent_size=8, batch_size=1, device="cpu")
    with torch.device("meta"):
        dit = resolve_model(cfg.model).build(cfg)
    x, labels = torch.zeros(1, 4, 8, 8, device="meta"), torch.zeros(1, dtype=torch.long, device="meta")

    def meta_forward():
        with torch.device("meta"):
            dit(x, timestep=labels, class_labels=labels)
    q = torch.randn(2, 4, 16, 8, requires_grad=True)

    def math_attention():
        q.grad = None  # each count from the same state: no gradient to accumulate into
        with sdpa_kernel(SDPBackend.MATH):
            torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    conv = torch.nn.Conv2d(8, 16, 3, groups=8)
    image = torch.randn(2, 8, 16, 16, requires_grad=True)

    def grouped_conv():
        conv.zero_grad(set_to_none=True)
        image.grad = None
        conv(image).sum().backward()
    return {"dit-tiny forward on meta": meta_forward, "sdpa math train": math_attention,
            "grouped conv train": grouped_conv}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a few models only")
    args = parser.parse_args()
    equal, differ, not_run = 0, [], []
    with tempfile.TemporaryDirectory() as folder:
        for values in configurations(Path(folder), args.quick):
            label = " ".join(f"{k}={v}" for k, v in values.items() if k not in ONE_STEP or k == "batch_size")
            label = label.replace(folder + "/", "")
            start = time.perf_counter()
            old, new = counted_in_a_run(values, old_count_flops), counted_in_a_run(values, flops.count_flops)
            if isinstance(old, str) or isinstance(new, str):
                not_run.append(f"{label}: {old if isinstance(old, str) else new}")
                print(f"not run  {label}: {not_run[-1]}", flush=True)
                continue
            same = old == new
            equal += same
            if not same:
                differ.append(f"{label}: old {old} new {new}")
            seconds = time.perf_counter() - start
            print(f"{'equal' if same else 'DIFFER':8s} {label} ({seconds:.1f} s): {new}", flush=True)
    for label, step in direct_steps().items():
        old, new = old_count_flops(step), flops.count_flops(step)
        same = old == new
        equal += same
        if not same:
            differ.append(f"{label}: old {old} new {new}")
        print(f"{'equal' if same else 'DIFFER':8s} {label}: {new}", flush=True)
    print(f"\n{equal} equal, {len(differ)} differ, {len(not_run)} not run")
    for line in differ + not_run:
        print("  " + line)
    assert not differ, "the new count differs from the old one"


if __name__ == "__main__":
    main()
