"""Count what one sequence of a published LLM training workload costs, for bench_core/data/workload_profiles.csv,
without running it: the model is built and stepped on fake tensors (torch's FakeTensorMode, the tracer
torch.compile uses), so a 7B model at 65,536 tokens is counted in seconds on a laptop, by the same counter
`bench run` uses (bench_core/measure/flops.py: FLOPs, the bytes of the FLOP ops and of the others, the ops).

The stand-in for llm-foundry's MPT models: a GPT in a few lines of torch (learned positions, pre-LayerNorm blocks,
GELU MLP of 4x, biases, tied embeddings: what MPT is with ALiBi off) at MPT's widths and depths, with causal SDPA
attention (the fused kernel, as llm-foundry's flash attention: no score matrix in memory), bf16 autocast, SGD.
Written out here rather than taken from transformers, whose mask code takes another path on fake tensors.

    PYTHONPATH=. .venv/bin/python benchmarks/llm_profiles.py --name mpt-125m --d-model 768 --layers 12 \
        --heads 12 --seq-len 2048
"""
from __future__ import annotations

import argparse
import csv
import io

import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from bench_core.measure.flops import count_flops

COLUMNS = ("model", "mode", "input_shape", "precision", "flops_per_sample", "flop_op_bytes_per_sample",
           "flop_op_bytes_per_step", "other_bytes_per_sample", "other_bytes_per_step", "grad_bytes_per_step",
           "ops_per_step", "task", "source")


VOCAB = 50368  # llm-foundry's MPT vocabulary


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, w = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, w))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, width: int, layers: int, heads: int, seq_len: int):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(VOCAB, width), nn.Embedding(seq_len, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)

    def forward(self, ids):
        x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        logits = self.norm(x) @ self.tokens.weight.t()  # tied embeddings
        return F.cross_entropy(logits.flatten(0, 1).float(), ids.flatten())


def counted(args: argparse.Namespace, batch: int):
    with FakeTensorMode():
        model = GPT(args.d_model, args.layers, args.heads, args.seq_len)
        params = sum(p.numel() for p in model.parameters())
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        ids = torch.randint(0, VOCAB, (batch, args.seq_len))

        def step():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(ids)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        c = count_flops(step)
    return c, params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", required=True)
    parser.add_argument("--d-model", type=int, required=True)
    parser.add_argument("--layers", type=int, required=True)
    parser.add_argument("--heads", type=int, required=True)
    parser.add_argument("--seq-len", type=int, required=True)
    args = parser.parse_args()
    (c1, params), (c2, _) = counted(args, 1), counted(args, 2)

    def split(one: float, two: float) -> tuple[float, float]:
        r1, r2 = one, two / 2  # per sample at batch 1 and 2
        return 2 * r2 - r1, 2 * (r1 - r2)

    flop_sample, flop_step = split(c1.flop_op_bytes, c2.flop_op_bytes)
    other_sample, other_step = split(c1.other_bytes, c2.other_bytes)
    row = {"model": args.name, "mode": "train", "input_shape": f"{args.seq_len} tokens", "precision": "amp",
           "flops_per_sample": f"{c1.flops:.6g}", "flop_op_bytes_per_sample": f"{flop_sample:.6g}",
           "flop_op_bytes_per_step": f"{flop_step:.6g}", "other_bytes_per_sample": f"{other_sample:.6g}",
           "other_bytes_per_step": f"{other_step:.6g}", "grad_bytes_per_step": f"{4.0 * params:.6g}",
           "ops_per_step": str(c1.ops), "task": "causal-lm",
           "source": (f"benchmarks/llm_profiles.py --name {args.name} --d-model {args.d_model} --layers {args.layers} "
                      f"--heads {args.heads} --seq-len {args.seq_len} (fake tensors, batch 1 and 2; a GPT "
                      f"at MPT's shape, {params / 1e6:.0f}M parameters, SDPA, amp-bf16, SGD); "
                      "llm-foundry trains MPT with FSDP, flash attention and LionW")}
    buffer = io.StringIO()
    csv.DictWriter(buffer, COLUMNS, lineterminator="\n").writerow(row)
    print(buffer.getvalue(), end="")


if __name__ == "__main__":
    main()
