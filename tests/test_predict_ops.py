"""A GPU row's profile keeps its ops' table (op_profile): each kind of op's measured time, calls, FLOPs, bytes and
cache reuse. Rehearsed on the CPU, the stand-in busy.py's tests drive."""
import json

import pytest
import torch

from bench_core.devices import Backend
from bench_core.measure.flops import count_flops
from bench_core.measure.op_table import REUSE_MB, OpKind, cache_hits, from_json, to_json
from bench_core.run import busy




@pytest.fixture(scope="module")
def cpu_profile():
    """A tiny training step (two convolutions, a norm, a linear head, SGD) profiled on the CPU stand-in with its ops
    counted, and what FlopCounterMode's pass counts for the same step."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 10))
    x, y = torch.randn(2, 3, 8, 8), torch.randint(0, 10, (2,))
    sgd = torch.optim.SGD(net.parameters(), lr=0.01)

    def step():
        sgd.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(net(x), y).backward()
        sgd.step()
    step()
    busy_s, _, table = busy.profiled(step, Backend.for_device(torch.device("cpu")), 1, ops=True)
    return busy_s, table, count_flops(step)


def test_the_profile_counts_each_op_as_the_flop_counter_counts_the_whole_step(cpu_profile):
    """The table's FLOPs, bytes and ops add up to what the run's own counters say for the step (flops.py), and each
    kind of op has its measured time; a cache holds no more than the bytes read, more the larger it is."""
    busy_s, table, counted = cpu_profile
    kinds, meta = from_json(table)
    assert meta == {"steps": 1, "busy_s": pytest.approx(busy_s, rel=1e-3), "device": "cpu"}
    assert sum(k.flops for k in kinds) == pytest.approx(counted.flops, rel=1e-4)
    assert sum(k.bytes for k in kinds) == pytest.approx(counted.flop_op_bytes + counted.other_bytes, rel=1e-4)
    assert sum(k.calls for k in kinds) == counted.ops
    assert {"convolution", "convolution_backward", "addmm"} <= {k.op for k in kinds}
    assert all(k.seconds is not None and k.seconds >= 0 for k in kinds) and sum(k.seconds for k in kinds) > 0
    for k in kinds:
        assert all(a <= b for a, b in zip(k.hits, k.hits[1:])) and k.hits[-1] <= k.bytes
    weights = sum(k.hits[-1] for k in kinds)
    assert weights > 0  # the weights are read in the forward, again in the backward and by SGD: the cache holds them


def test_a_table_reads_back_as_written_and_an_unreadable_cell_is_no_table():
    kinds = [OpKind("mm", "bf16", 3, 6e9, 3e7, [1e6] * len(REUSE_MB), 2e-3)]
    back, meta = from_json(to_json(kinds, steps=3, busy_s=0.01, device="cuda"))
    assert meta == {"steps": 3, "busy_s": 0.01, "device": "cuda"}
    assert (back[0].op, back[0].math, back[0].calls, back[0].flops, back[0].seconds) == ("mm", "bf16", 3, 6e9, 2e-3)
    for cell in (None, "", "not json", json.dumps({"format": 99, "ops": []}), "[1, 2]"):
        assert from_json(cell) == ([], {})
    hits = [float(mb) for mb in REUSE_MB]  # a cache between two sizes holds a share between their hits
    assert cache_hits(hits, 2) == 2 and cache_hits(hits, 1000) == REUSE_MB[-1] and cache_hits(hits, None) == 0
    assert 32 < cache_hits(hits, 50) < 64
