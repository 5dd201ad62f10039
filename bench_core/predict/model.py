"""The prediction model: the time one sample takes on a GPU by its spec sheet, the efficiency the
measured device reached against that time, carried over to the other device.

Per sample, with F the FLOPs, Bf the bytes the FLOP ops (matmuls, convs, attention) move and Bo
the bytes every other op moves (nothing fused: bench_core/measure/flops.py counts them), P the
dense peak of the precision's math class and W the memory bandwidth:

    split roofline (default):  t = max(F / P, Bf / W) + Bo / W
    plain roofline:            t = max(F / P, (Bf + Bo) / W)

The split form is the roofline applied to the two kinds of kernel an eager step runs one after the
other: the FLOP ops at whichever of peak and bandwidth binds them, the rest at the bandwidth.
Bytes that come once per step (weights, optimizer state) are spread over the per-GPU batch.

N GPUs of data parallelism add a ring all-reduce of the gradients per step, not overlapped:

    c = 2 (N - 1) / N x G / L,   L = min(link_gbps / 2 of the GPU, network_gbps between nodes)

and a step of batch b per GPU takes b t / e + c, where e is the efficiency: the measured
throughput over the ideal one on the measured device. The prediction is N b / (b t' / e + c').

A small step (host-bound: its launch floor is a quarter or more of its ideal time on the measured
device, bench_core/predict/groups.py) is the host's time, not the GPU's: it carries over unchanged
(per sample, at the target's batch), unless the target's roofline alone is slower:
N b / max(measured step, b t' + c'). The converse, a target whose step would be shorter than the host's time
per step (the host-floor term): where the source's machine published its step at batch 1 (an inference latency
table: the same ops launched, the host's time), the target's step is at least that long, N b / max(., h).

A GPU with more SMs needs more parallel work to run full, and a step's work grows with its batch (the fill term):
where the source's machine published or measured the same table at other batches (its ladder: samples/s at each
batch), the target at batch b runs as full as the source did at b x SMs_source / SMs_target, so the prediction is
multiplied by thr_source(b x SMs_source / SMs_target) / thr_source(b_source), thr read on the ladder (log-log
between its batches; outside them, the nearest end's samples/s: no correction the ladder cannot show).
Habitat's wave scaling, for a whole step: the source's own ladder says how its fill grows with the batch.
Nothing is fitted: every number is a datasheet figure, a count, or a measured row.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, replace

from bench_core.predict.ceilings import Ceilings, op_roofline_s
from bench_core.predict.groups import SMALL_STEP_FLOOR_SHARE
from bench_core.predict.specs import Spec

# The model's terms; an ablation leaves one out (docs/prediction.md shows what each is worth).
TERMS = ("software-default", "split", "batch", "interconnect", "host-bound", "host-floor", "achieved", "residual",
         "fill")
# Tested, not assumed, and off: each kind of op of the published workloads at its own roofline (op tables counted at
# each published batch, data/workload_ops.csv), and with it the bytes an L2 holds. On the published pairs neither
# helps (the error table's 'with' lines): the whole step's split roofline and its residual already carry them.
TESTED = ("per-op", "cache")

# The launch floor: an eager step runs its ops one by one, and the host spends at least this long on each
# (Python, the dispatcher's layers, cudaLaunchKernel) however small its kernel, so no GPU runs the step in
# less than ops_per_step x this. 5 us is the low end of the 5-25 us of CPU-side dispatch one op costs in
# eager PyTorch on a current GPU server (jiahuanglin.xyz, "From PyTorch op to kernel launch", GPU kernel
# serving lesson 18: cudaLaunchKernel alone 1-3 us): the floor is a lower bound of the step, so a
# prediction capped by it stays an upper bound. Not yet taken from a GPU run of ours (a batch ladder of one
# small model on a GPU would give it).
HOST_S_PER_OP = 5e-6
FLOOR_SOURCE = ("5 us a kernel: the low end of eager PyTorch's 5-25 us of host time per op (jiahuanglin.xyz, "
                "'From PyTorch op to kernel launch'); not yet measured on a GPU of ours, and below every published "
                "figure's (23 us an op or more: docs/prediction.md)")


@dataclass(frozen=True)
class Profile:
    """What one sample of a workload costs, and where the figures come from."""
    flops: float                 # FLOPs per sample (train: forward + backward)
    flop_op_bytes: float         # bytes per sample moved by the FLOP ops
    other_bytes: float           # bytes per sample moved by the other ops
    flop_op_step_bytes: float = 0.0   # bytes per step of the FLOP ops (weights), spread over the batch
    other_step_bytes: float = 0.0     # bytes per step of the other ops (optimizer, casts of weights)
    grad_bytes: float = 0.0      # bytes all-reduced per step under data parallelism (4 x parameters)
    source: str = ""
    ops_per_step: float = 0.0    # ops one eager step runs, a kernel each on a GPU (0: not counted, no floor)
    ops: tuple = ()              # the step's op table at ops_batch (measure/op_table.OpKind): the per-op roofline
    ops_batch: float | None = None


@dataclass(frozen=True)
class Setup:
    """One device configuration: the GPU, the math class its precision runs at, how many GPUs."""
    gpu: Spec
    math: str                    # peak class: fp32, tf32, fp16, bf16, fp8
    gpus: int = 1
    nodes: int = 1
    batch: float | None = None   # per GPU; None: the per-step bytes are left out (a large batch)
    network_gbps: float | None = None  # between nodes, per node (GB/s), where nodes > 1


@dataclass(frozen=True)
class Times:
    compute_s: float             # F / P
    flop_op_memory_s: float      # Bf / W
    other_memory_s: float        # Bo / W
    sample_s: float              # the model's time per sample
    comm_s: float                # all-reduce time per step
    binds: str                   # which ceiling binds, in words


@dataclass(frozen=True)
class Prediction:
    value: float                 # predicted samples/s (all GPUs)
    efficiency: float            # measured / ideal on the source
    source: Times
    target: Times
    note: str                    # the terms used, with where their numbers came from


def _per_sample(step_bytes: float, batch: float | None, use_batch: bool) -> float:
    return step_bytes / batch if use_batch and batch else 0.0


def times(profile: Profile, setup: Setup, terms: tuple[str, ...] = TERMS, cache_mb: float | None = None) -> Times:
    """The step's ideal times on `setup` (per sample). With an op table at this batch and the per-op term, each kind
    of op at its own roofline (and, with the cache term, the bytes an L2 of `cache_mb` holds left out); else the
    split roofline of the whole step's counts."""
    ceilings = Ceilings(setup.gpu, achieved="achieved" in terms)
    if "per-op" in terms and profile.ops and setup.batch and profile.ops_batch == setup.batch:
        return op_times(profile, setup, terms, ceilings, cache_mb if "cache" in terms else None)
    peak, bandwidth = ceilings.peak(setup.math), ceilings.bandwidth()
    use_batch = "batch" in terms
    flop_bytes = profile.flop_op_bytes + _per_sample(profile.flop_op_step_bytes, setup.batch, use_batch)
    other_bytes = profile.other_bytes + _per_sample(profile.other_step_bytes, setup.batch, use_batch)
    compute = profile.flops / peak
    flop_mem, other_mem = flop_bytes / bandwidth, other_bytes / bandwidth
    if "split" in terms:
        sample = max(compute, flop_mem) + other_mem
    else:
        sample = max(compute, flop_mem + other_mem)
    comm = comm_seconds(profile, setup) if "interconnect" in terms else 0.0
    memory = flop_mem + other_mem
    kind = "compute" if compute >= memory else "memory"
    ceiling = (f"dense {setup.math} peak" if kind == "compute" else "memory bandwidth")
    binds = f"{kind} ({ceiling}; compute {compute / (compute + memory):.0%} of compute + memory time)"
    if comm and setup.batch:
        share = comm / (comm + setup.batch * sample)
        if share > 0.05:
            binds += f"; interconnect {share:.0%} of the ideal step"
    return Times(compute, flop_mem, other_mem, sample, comm, binds)


def op_times(profile: Profile, setup: Setup, terms: tuple[str, ...], ceilings: Ceilings, cache_mb: float | None
             ) -> Times:
    """times() from the op table: each kind of op at max(its FLOPs / peak, its memory bytes / bandwidth)."""
    compute = flop_mem = other_mem = step = in_compute = 0.0
    for kind in profile.ops:
        c, m = op_roofline_s(kind, ceilings, setup.math, cache_mb)
        step, compute = step + max(c, m), compute + c
        flop_mem, other_mem = (flop_mem + m, other_mem) if kind.flops else (flop_mem, other_mem + m)
        in_compute += c if kind.flops and c >= m else 0.0
    comm = comm_seconds(profile, setup) if "interconnect" in terms else 0.0
    binds = (f"{'compute' if in_compute >= step / 2 else 'memory'} (per op: {in_compute / step:.0%} of the ideal step "
             f"in compute-bound ops" + (f"; an L2 of {cache_mb:g} MB" if cache_mb else "") + ")")
    batch = setup.batch
    return Times(compute / batch, flop_mem / batch, other_mem / batch, step / batch, comm, binds)


def comm_seconds(profile: Profile, setup: Setup) -> float:
    """Ring all-reduce of the gradients per step (not overlapped with compute)."""
    n = setup.gpus
    if n <= 1 or not profile.grad_bytes:
        return 0.0
    link = setup.gpu.number("link_gbps") / 2   # the datasheet's figure is both directions together
    if setup.nodes > 1:
        link = min(link, setup.network_gbps or link)
    return 2 * (n - 1) / n * profile.grad_bytes / (link * 1e9)


def _step_s(t: Times, batch: float, efficiency: float) -> float:
    return batch * t.sample_s / efficiency + t.comm_s


def predict(measured: float, source: Setup, target: Setup, profile: Profile,
            terms: tuple[str, ...] = TERMS, host_bound: str = "", gpu_bound: str = "",
            target_profile: Profile | None = None, host_step_s: float | None = None,
            ladder: dict[float, float] | None = None) -> Prediction:
    """Throughput (samples/s, all GPUs) on `target`, from `measured` on `source`. `host_bound` ('gpu busy 17%'):
    the source row was measured host-bound, so its step is the host's whatever its launch floor says;
    `gpu_bound` ('gpu busy 90%'): it was measured busy, so its step is the GPU's whatever its launch floor says;
    `host_step_s`: the host's time per step on the source's machine where it was measured (the step of the same
    table at batch 1, host-bound there), a floor of the target's step (the host-floor term); `ladder`: samples/s at
    each batch the source's machine ran the same table at (the fill term)."""
    l2 = (Ceilings(source.gpu).l2_mb(), Ceilings(target.gpu).l2_mb())
    if None in l2:  # a cache known on one side only would favour that side
        l2 = (None, None)
    src = times(profile, source, terms, l2[0])
    dst = times(target_profile or profile, target, terms, l2[1])
    b_src = source.batch or 1.0
    b_dst = target.batch or b_src
    # measured = N b / (b t / e + c)  ->  e = b t / (N b / measured - c)
    budget = source.gpus * b_src / measured - src.comm_s
    if budget <= 0:  # the all-reduce alone is longer than the measured step: leave it out of e
        budget = source.gpus * b_src / measured
    efficiency = b_src * src.sample_s / budget
    value = target.gpus * b_dst / _step_s(dst, b_dst, efficiency)
    note = (f"efficiency {efficiency:.1%} on {source.gpu.gpu} ({source.math}) carried to "
            f"{target.gpu.gpu} ({target.math}); terms: {', '.join(terms) or 'none'}")
    rest = residual_step_s(budget, b_src, src, source, target, b_dst) if "residual" in terms else None
    if rest is not None:
        value = target.gpus * b_dst / (b_dst * dst.sample_s + dst.comm_s + rest)
        note = (f"the rooflines explain {efficiency:.0%} of the step on {source.gpu.gpu} ({source.math}); the rest "
                f"({1 - efficiency:.0%}) carried to {target.gpu.gpu} ({target.math}) at the ratio of the GPUs' SM issue "
                f"rates; terms: {', '.join(terms)}")
    fill, like = (fill_ratio(ladder, b_src, b_dst, source, target) if "fill" in terms else None) or (1.0, b_dst)
    if fill != 1.0:  # the GPU's part of the step, not the all-reduce
        value = target.gpus * b_dst / ((target.gpus * b_dst / value - dst.comm_s) / fill + dst.comm_s)
        dst = replace(dst, binds=f"{dst.binds}; fill x{fill:.2f} (as full as the source at batch {like:.3g})")
        note += (f"; fill x{fill:.2f}: at batch {b_dst:g} {target.gpu.gpu} runs as full as {source.gpu.gpu} did at "
                 f"{like:.3g} (their SMs), by the source's ladder")
    share = floor_share(profile, source, terms)
    small = share is not None and share >= SMALL_STEP_FLOOR_SHARE and not gpu_bound
    if "host-bound" in terms and (host_bound or small):
        # a small step: the measured time is the host's, the same on the target unless its roofline is slower
        host_step = source.gpus * b_dst / measured  # the measured step, per sample, at the target's batch
        ideal_step = b_dst * dst.sample_s + dst.comm_s
        value = target.gpus * b_dst / max(host_step, ideal_step)
        why = (f"measured host-bound on {source.gpu.gpu}: {host_bound}" if host_bound else
               f"a small step: its launch floor is {share:.0%} of its ideal time on {source.gpu.gpu}")
        binds = f"host ({why}; the measured step carried over)" if host_step >= ideal_step else dst.binds
        dst = replace(dst, binds=binds)
        note = (f"a host-bound step measured on {source.gpu.gpu} carried to {target.gpu.gpu} unchanged unless its "
                f"roofline is slower; terms: {', '.join(terms)}")
    if "host-floor" in terms and host_step_s and target.gpus * b_dst / host_step_s < value:
        # the host launches the same ops at any batch: the target's GPU cannot make the step shorter than that
        value = target.gpus * b_dst / host_step_s
        dst = replace(dst, binds=f"host (the host's {host_step_s * 1e3:.3g} ms a step, as {source.gpu.gpu}'s machine "
                                 f"measured it at batch 1, carried over)")
    floor = launch_floor(target.gpus, b_dst, profile.ops_per_step)
    if floor is not None and floor[0] < value:  # the host cannot launch the step's kernels any faster
        value, dst = floor[0], replace(dst, binds=floor[1])
    return Prediction(value, efficiency, src, dst, note)


def residual_step_s(budget: float, b_src: float, src: Times, source: Setup, target: Setup, b_dst: float) -> float | None:
    """The part of the measured step (`budget`: its time less the all-reduce) that the source's rooflines do not
    explain, per step at the target's batch, scaled to the target by the ratio of the GPUs' SM issue rates (SMs x
    clock): the time kernels spend below both ceilings (waves, tails, latency, small kernels) runs on the SMs,
    whatever the DRAM or the tensor cores could do. None where it cannot apply: the rooflines explain the whole
    step (efficiency of 100 % or more) or a GPU's issue rate is not known."""
    issue_src = Ceilings(source.gpu).issue_rate()
    issue_dst = Ceilings(target.gpu).issue_rate()
    rest = budget - b_src * src.sample_s
    if rest <= 0 or not issue_src or not issue_dst:
        return None
    return rest * (b_dst / b_src) * issue_src / issue_dst


def fill_ratio(ladder: dict[float, float] | None, b_src: float, b_dst: float, source: Setup, target: Setup
               ) -> tuple[float, float] | None:
    """(how full the target runs at b_dst against how full the source ran at b_src, the source's batch it runs as
    full as), from the source's ladder (batch -> samples/s on its machine, the same table): thr(b_dst x SMs_src /
    SMs_dst) / thr(b_src). None where it cannot apply: no ladder, or an SM count not known."""
    sms_src, sms_dst = Ceilings(source.gpu).sms(), Ceilings(target.gpu).sms()
    if not ladder or not sms_src or not sms_dst:
        return None
    like = b_dst * sms_src / sms_dst
    return ladder_throughput(ladder, like) / ladder_throughput(ladder, b_src), like


def ladder_throughput(ladder: dict[float, float], batch: float) -> float:
    """Samples/s at `batch` on a ladder: log-log between its batches; outside them, the nearest end's (a fill the
    ladder does not show is not assumed)."""
    points = sorted(ladder.items())
    i = bisect.bisect_left([b for b, _ in points], batch)
    if i < len(points) and points[i][0] == batch:
        return points[i][1]
    if i == 0 or i == len(points):
        return points[min(i, len(points) - 1)][1]
    (lo, thr_lo), (hi, thr_hi) = points[i - 1], points[i]
    share = math.log(batch / lo) / math.log(hi / lo)
    return math.exp(math.log(thr_lo) + share * (math.log(thr_hi) - math.log(thr_lo)))


def floor_share(profile: Profile, setup: Setup, terms: tuple[str, ...] = TERMS) -> float | None:
    """The step's launch floor over its ideal time on `setup`'s GPU (None: the ops were not counted). The ideal is
    the roofline at the datasheet's ceilings, as the small-step rule was set (groups.SMALL_STEP_FLOOR_SHARE)."""
    if not profile.ops_per_step:
        return None
    t = times(profile, setup, without("achieved", terms))
    return profile.ops_per_step * HOST_S_PER_OP / ((setup.batch or 1.0) * t.sample_s + t.comm_s)


def launch_floor(gpus: int, batch: float, ops: float | None) -> tuple[float, str] | None:
    """The most samples/s the host can launch a step's kernels for (gpus x batch / (ops x HOST_S_PER_OP)),
    and the words for it, or None where the ops were not counted."""
    if not ops:
        return None
    return (gpus * batch / (float(ops) * HOST_S_PER_OP),
            f"launch floor ({int(ops):,} kernels a step x {HOST_S_PER_OP * 1e6:g} us)")


def without(term: str, terms: tuple[str, ...] = TERMS) -> tuple[str, ...]:
    return tuple(t for t in terms if t != term)


def relative_error(predicted: float, actual: float) -> float:
    """predicted / actual - 1 (0.25: 25 % too high)."""
    return predicted / actual - 1 if actual and not math.isnan(actual) else math.nan
