"""The GPU-path fixes of issues 20 and 28, checked on CPU with the real torch wherever CPU can run
them: TF32 knobs (set, read back, restored), OOM classification (CudaBackend builds without a
GPU), config checks, the peak table, and bench compare's two-GPU logic through a stand-in for
two GPUs' streams and events."""
from __future__ import annotations

import csv
import gc
import os
import re
import time

import pytest
import torch

from bench_core import BenchConfig, ConfigError, run_benchmark
from bench_core.devices import (Backend, CudaBackend, is_library_alloc_failure, numerics_state, restore_numerics,
                                set_tf32, tf32_flags)
from bench_core.measure.peaks import GPU_PEAKS_CSV, PEAK_CLASS, gpu_peak, gpu_peak_table
from bench_core.workload.precision import resolve_precision
from bench_core.run.runner import Session
from conftest import tiny


@pytest.fixture
def numerics():
    """Each test leaves torch's process-wide knobs as it found them."""
    before = numerics_state()
    yield before
    restore_numerics(before)


# -- 1. TF32 knobs ----------------------------------------------------------------------

@pytest.mark.parametrize("enabled", [True, False])
def test_tf32_setting_leaves_every_accessor_readable_and_consistent(enabled, numerics):
    set_tf32(enabled)
    flags = tf32_flags()  # the legacy readers raise on a mix of legacy and new settings
    assert torch.get_float32_matmul_precision() == ("high" if enabled else "highest")
    assert torch.backends.cuda.matmul.allow_tf32 is enabled
    assert torch.backends.cudnn.allow_tf32 is enabled
    mode = "tf32" if enabled else "ieee"
    assert flags["cuda.matmul.fp32_precision"] == mode
    assert flags["cudnn.fp32_precision"] == mode  # what compiled convolutions read
    assert flags["cudnn.conv.fp32_precision"] == mode
    assert flags["cudnn.rnn.fp32_precision"] == mode


def test_the_old_new_api_only_setting_is_what_broke_the_readers(numerics):
    # What CudaBackend.apply_knobs did before: reading back raised. Kept as the reason for set_tf32.
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    with pytest.raises(RuntimeError, match="mix of the legacy and new APIs"):
        torch.get_float32_matmul_precision()
    restore_numerics(numerics)
    assert tf32_flags() == tf32_flags()  # readable again after the restore


@pytest.mark.parametrize("user_setting", [
    lambda: torch.set_float32_matmul_precision("high"),
    lambda: torch.set_float32_matmul_precision("medium"),
    lambda: setattr(torch.backends.cudnn, "allow_tf32", False),
    lambda: setattr(torch.backends, "fp32_precision", "tf32"),  # new API only: legacy readers raise
])
def test_restore_puts_back_what_the_user_had(user_setting, numerics):
    user_setting()
    torch.backends.cudnn.benchmark = True
    before = numerics_state()
    set_tf32(False)
    torch.backends.cudnn.benchmark = False
    restore_numerics(before)
    assert numerics_state() == before


def test_cpu_backend_applies_strict_fp32_and_reads_it_back(numerics):
    torch.set_float32_matmul_precision("medium")  # a user's setting: bf16 matmuls in oneDNN
    knobs = Backend(torch.device("cpu")).apply_knobs(resolve_precision("fp32"), cudnn_benchmark=True)
    assert knobs["tf32_enabled"] is False
    assert "float32_matmul_precision=highest" in knobs["tf32_flags"]
    assert "mkldnn.matmul.fp32_precision=ieee" in knobs["tf32_flags"]


def test_a_run_records_the_flags_and_restores_the_callers_settings(numerics):
    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.benchmark = True
    before = numerics_state()
    row = run_benchmark(tiny())[0]
    assert row["status"] == "ok", row["message"]
    assert row["tf32_enabled"] is False
    assert "float32_matmul_precision=highest" in row["tf32_flags"]
    assert "cuda.matmul.allow_tf32=False" in row["tf32_flags"]
    # After the run: every accessor readable, the caller's settings back.
    tf32_flags()
    assert numerics_state() == before
    assert torch.get_float32_matmul_precision() == "high"


# -- 4. no CUDA context outside the benchmarking process ------------------------------------

def test_building_a_backend_binds_nothing(monkeypatch):
    # Launchers, pre-run checks and find-batch's parent build backends: no GPU made current there.
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: pytest.fail("bound while building"))
    backend = Backend.for_device(torch.device("cuda", 0))
    assert isinstance(backend, CudaBackend) and backend.device == torch.device("cuda", 0)
    assert Backend.for_device(torch.device("cpu")).bind() is None


# -- 5. the FLOP-count step's optimizer does not outlive the count --------------------------

def _optimizers() -> list:
    import warnings
    gc.collect()
    with warnings.catch_warnings():  # isinstance() on torch.distributed.reduce_op warns (deprecated)
        warnings.simplefilter("ignore")
        return [o for o in gc.get_objects() if isinstance(o, torch.optim.Optimizer)]


# compile "default" is the case the fix is for (a second, eager optimizer); it compiles with
# inductor, which takes minutes on a loaded 2-core machine: run it with BENCH_TEST_COMPILE=1.
@pytest.mark.parametrize("compile_mode", ["off", pytest.param("default", marks=pytest.mark.skipif(
    not os.environ.get("BENCH_TEST_COMPILE"), reason="inductor compile: set BENCH_TEST_COMPILE=1"))])
def test_only_the_timed_steps_optimizer_stays_alive(compile_mode, numerics):
    from test_capacity import TinyCNN  # noqa: F401 - registers test_tiny_cnn
    existing = {id(o) for o in _optimizers()}
    cfg = BenchConfig(model="test_tiny_cnn", batch_size=2, steps=1, warmup_steps=3, repeats=1, min_seconds=0,
                      device="cpu", optimizer="adam", compile=compile_mode)
    session = Session(cfg)
    try:
        assert session.open(), session.failure
        alive = [o for o in _optimizers() if id(o) not in existing]
        assert len(alive) == 1  # with compile: the compiled step's; the eager FLOP-count one is gone
        assert session.window(0)["status"] == "ok"
    finally:
        session.close()


# -- 6. OOM classification ----------------------------------------------------------------

# Messages as torch formats them (TORCH_CUDABLAS_CHECK, AT_CUDNN_CHECK, the caching allocator).
OOM_MESSAGES = [
    "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasLtMatmul( ltHandle, computeDesc.descriptor(), ...)`",
    "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
    "cuDNN error: CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED",
    "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.25 GiB",
    "CUDA error: out of memory",
    "[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: can't allocate memory: "
    "you tried to allocate 8589934592 bytes. Error code 12 (Cannot allocate memory)",
]
NOT_OOM = [
    "CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, m, n, k, ...)`",
    "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input.",
    "CUDA error: an illegal memory access was encountered",
    "Expected more than 1 value per channel when training, got input size torch.Size([1, 512, 1, 1])",
]


@pytest.mark.parametrize("message", OOM_MESSAGES)
def test_allocation_failures_are_out_of_memory(message):
    assert Backend(torch.device("cpu")).is_oom(RuntimeError(message))
    assert CudaBackend(torch.device("cuda", 0)).is_oom(torch.AcceleratorError(message))


def test_cuda_backend_classifies_torchs_own_exceptions():
    # CudaBackend builds without a GPU (device properties are read only when asked): its
    # classification runs here on the exception types torch raises on a GPU.
    backend = CudaBackend(torch.device("cuda", 0))
    assert backend.is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
                                                 "total capacity of 15.77 GiB of which 1.06 GiB is free."))
    assert backend.is_oom(torch.cuda.OutOfMemoryError(""))  # the same class, any message
    assert not backend.is_oom(torch.AcceleratorError("CUDA error: an illegal memory access was encountered"))
    assert not backend.is_oom(torch.AcceleratorError("CUDA error: device-side assert triggered"))


@pytest.mark.parametrize("message", NOT_OOM)
def test_other_failures_are_not(message):
    assert not Backend(torch.device("cpu")).is_oom(RuntimeError(message))
    assert not CudaBackend(torch.device("cuda", 0)).is_oom(RuntimeError(message))
    assert not is_library_alloc_failure(message)


# -- issue 28: bench compare with two GPUs -----------------------------------------------------

class TwoGpus:
    """A stand-in for two GPUs' streams and events (no hardware here): each stream has its own
    device clock; an event records its stream's time. What runs on a GPU advances its clock."""

    def __init__(self):
        self.current = 0
        self.clock = {0: 0.0, 1: 0.0}
        gpus = self

        class Stream:
            def __init__(self, index):
                self.index = index

        class Event:
            def __init__(self, enable_timing=False):
                self.at = None

            def record(self, stream=None):
                stream = stream or gpus.current_stream()
                self.at = gpus.clock[stream.index]

            def synchronize(self):
                pass

            def elapsed_time(self, end):
                return (end.at - self.at) * 1e3

        self.Stream, self.Event = Stream, Event

    def current_stream(self, device=None):
        index = self.current if device is None else (device if isinstance(device, int) else device.index)
        return self.Stream(index)

    def set_device(self, device):
        self.current = device if isinstance(device, int) else device.index


@pytest.fixture
def two_gpus(monkeypatch):
    gpus = TwoGpus()
    monkeypatch.setattr(torch.cuda, "Event", gpus.Event)
    monkeypatch.setattr(torch.cuda, "current_stream", gpus.current_stream)
    monkeypatch.setattr(torch.cuda, "set_device", gpus.set_device)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    return gpus


def test_a_window_is_timed_on_its_own_gpu_whatever_gpu_is_current(two_gpus):
    from bench_core.run.timing import timed_window
    backend = CudaBackend(torch.device("cuda", 1))   # variant A on cuda:1
    two_gpus.current = 0                            # B was opened last: cuda:0 is current

    def step(mark=None):                                     # A's work: 10 ms on cuda:1's clock
        two_gpus.clock[1] += 0.010
    window = timed_window(step, backend, min_steps=3, min_seconds=0.0)
    assert window.seconds == pytest.approx(0.030)
    assert window.step_s == pytest.approx([0.010] * 3)


def test_a_mark_inside_the_window_only_records_an_event(two_gpus, monkeypatch):
    """Issue 59 item 2: at batch 1 a GPU step is the host's time, and a mark's Python was part of it. The
    window's events are made (and recorded once) before it, and the stream is looked up once."""
    from bench_core.run.timing import timed_window
    made, looked_up = [], []
    event_class, current_stream = two_gpus.Event, two_gpus.current_stream

    class CountedEvent(event_class):
        def __init__(self, enable_timing=False):
            super().__init__(enable_timing)
            made.append(self)

    monkeypatch.setattr(torch.cuda, "Event", CountedEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: looked_up.append(1) or current_stream(device))
    inside = []

    def step(mark=None):  # 10 ms on cuda:0's clock and the host's; what the window made so far, seen from inside it
        two_gpus.clock[0] += 0.010
        time.sleep(0.010)
        inside.append((len(made), len(looked_up)))
    # min_steps, not min_seconds, makes it five steps: the window also ends on the host's clock, which a busy
    # machine's sleeps outrun (3 steps took 0.15 s of host time beside the suite's other workers)
    window = timed_window(step, CudaBackend(torch.device("cuda", 0)), min_steps=5, min_seconds=0.05, step_s=0.010)
    assert window.step_s == pytest.approx([0.010] * window.steps) and window.steps >= 5
    assert len(set(inside)) == 1  # no event made and no stream looked up between the first step and the last


def test_each_window_makes_its_own_gpu_current(two_gpus, numerics):
    two_gpus.current = 0
    CudaBackend(torch.device("cuda", 1)).apply_knobs(resolve_precision("fp32"), cudnn_benchmark=False)
    assert two_gpus.current == 1  # so anything that uses the current device runs on this variant's GPU


# -- 7. compile needs a warm-up; 8. channels_last is refused for detection ---------------------

@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune"])
def test_compile_needs_at_least_three_warmup_steps(mode):
    with pytest.raises(ConfigError, match=r"^warmup_steps: must be >= 3 with compile") as info:
        tiny(compile=mode, warmup_steps=2)
    assert "\n" not in str(info.value)
    assert tiny(compile=mode, warmup_steps=3).warmup_steps == 3
    assert tiny(compile="off", warmup_steps=0).warmup_steps == 0


def test_params_files_still_validate(monkeypatch):
    from pathlib import Path
    from bench_core.sweep import plan
    from bench_core.sweep.plan import load_sweep
    # The GPU files name cuda; whether this machine has one is not what is checked here.
    monkeypatch.setattr(plan, "resolve_device", lambda name, local_rank=0: torch.device("cpu"))
    for path in sorted(Path(__file__).parents[1].glob("params/*.yaml")):
        assert load_sweep(path).configs  # every configuration of every sweep file is a valid BenchConfig


def test_channels_last_is_refused_for_detection_models():
    with pytest.raises(ConfigError, match=r"^channels_last: not for detection models"):
        BenchConfig(model="ssd300_vgg16", channels_last=True, device="cpu")
    assert BenchConfig(model="ssd300_vgg16", channels_last=False, device="cpu").channels_last is False


# -- 8. environment: NCCL version only with CUDA -----------------------------------------

def test_nccl_version_is_recorded_only_with_cuda():
    from bench_core.measure import environment
    env = environment.collect()
    assert "nccl_version" in env
    if not torch.cuda.is_available():
        assert env["nccl_version"] is None


# -- 8. the peak table -----------------------------------------------------------------------

def test_every_peak_row_parses_and_has_a_source():
    rows = gpu_peak_table()
    assert rows
    for row in rows:
        re.compile(row["gpu_pattern"])
        assert row["quantity"] in set(PEAK_CLASS.values()) | {"fp8"}
        assert row["value"] in ("none", "unpublished") or 0 < float(row["value"]) < 10000
        assert re.search(r"https?://\S+$", row["source"]), row
    with open(GPU_PEAKS_CSV, newline="") as handle:  # no row lost to a stray comma or quote
        data = [line for line in handle if line.strip() and not line.startswith("#")]
    assert all(len(r) == 5 for r in csv.reader(data))


@pytest.mark.parametrize("name, precision, tflops", [
    ("NVIDIA H100 NVL", "amp-bf16", 835.5),
    ("NVIDIA GH200 480GB", "amp-fp16", 989.5),
    ("NVIDIA H800", "tf32", 494.5),
    ("NVIDIA H800 PCIe", "fp32", 51),
    ("NVIDIA A800-SXM4-80GB", "amp-bf16", 312),
    ("NVIDIA A800 80GB PCIe", "tf32", 156),
    ("NVIDIA RTX A6000", "amp-fp16", 154.8),
    ("NVIDIA RTX 6000 Ada Generation", "fp32", 91.1),
    ("NVIDIA B200", "amp-bf16", 2250),
    ("Tesla V100S-PCIE-32GB", "amp-fp16", 130),
    # issue 28
    ("NVIDIA B200", "fp32", 75),
    ("NVIDIA B200", "tf32", 1100),       # the per-GPU sheet (2.2 PFLOPS sparse), not the 8-GPU total / 8
    ("NVIDIA GB200", "amp-bf16", 2500),
    ("NVIDIA H200 NVL", "amp-bf16", 835.5),
    ("NVIDIA H200 NVL", "fp32", 60),
    ("NVIDIA H200", "fp32", 67),         # the SXM's row does not catch the NVL
    ("Tesla V100-SXM3-32GB", "amp-fp16", 125),
])
def test_the_filled_gaps_are_found_by_device_name(name, precision, tflops):
    peak = gpu_peak(name, precision)
    assert peak.tflops == pytest.approx(tflops) and peak.source.startswith("datasheet, dense")


def test_every_listed_gpu_has_all_four_classes_and_fp8_where_it_has_it():
    by_gpu: dict[str, dict] = {}
    for row in gpu_peak_table():
        classes = by_gpu.setdefault(row["gpu"], {})
        assert row["quantity"] not in classes, f"{row['gpu']} lists {row['quantity']} twice"
        classes[row["quantity"]] = row["value"]
    for gpu, classes in by_gpu.items():
        assert set(classes) - {"fp8"} == {"fp32", "tf32", "fp16", "bf16"}, gpu
        assert classes["fp32"] != "none" and classes["fp16"] != "none", gpu  # every GPU listed has both
        numbers = {k: float(v) for k, v in classes.items() if v not in ("none", "unpublished")}
        if "fp32" in numbers:  # a tensor-core figure below the FP32 units' would be a sparse/dense or unit mix-up
            assert all(v >= numbers["fp32"] for v in numbers.values()), gpu


@pytest.mark.parametrize("name, precision, expected, why", [
    ("NVIDIA A10G", "amp-bf16", None, "publishes no datasheet for the A10G"),
    ("NVIDIA A10G", "fp32", None, "publishes no datasheet for the A10G"),
    ("NVIDIA RTX 6000 Ada Generation", "amp-bf16", None, "only as FP8 with sparsity"),
    ("Tesla T4", "amp-bf16", 8.1, "Turing has no bf16 tensor cores"),
    ("Tesla V100-SXM3-32GB", "bf16", 15.7, "Volta has no bf16 tensor cores"),
])
def test_an_absent_figure_is_empty_or_the_fp32_peak_with_the_reason(name, precision, expected, why):
    peak = gpu_peak(name, precision)
    assert peak.tflops == expected and why in peak.source
    if expected is None:
        assert peak.source.endswith("mfu left empty")


# -- 8. NVML process matching inside a container --------------------------------------------

def test_an_unresolvable_own_pid_counts_others_without_naming_one():
    from bench_core.measure import nvml
    inside = nvml.NvmlDevice(nvml=None, handle=None)
    inside._note_processes({4_000_001, 4_000_002})  # host pids, none of them ours as we see it
    notes: list[str] = []
    cols = inside.columns(notes)
    assert cols["noise_flags"] == "other-processes-on-device(1 other, pids not resolvable)"
    assert any("none named" in n for n in notes)
    alone = nvml.NvmlDevice(nvml=None, handle=None)
    alone._note_processes({4_000_001})  # only one process on the device: this one
    assert "noise_flags" not in alone.columns([])
    visible = nvml.NvmlDevice(nvml=None, handle=None)
    visible._note_processes({os.getpid(), 4_000_003})
    assert visible.columns([])["noise_flags"] == "other-processes-on-device(pid 4000003)"


def test_compare_rows_say_their_memory_includes_both_variants(numerics):
    from test_capacity import TinyCNN  # noqa: F401 - registers test_tiny_cnn
    from bench_core.scenarios.compare import compare
    cfg = BenchConfig(model="test_tiny_cnn", batch_size=2, steps=2, warmup_steps=1, repeats=1, min_seconds=0,
                      device="cpu")
    result = compare(cfg, cfg, rounds=2)
    for row in result.rows_a + result.rows_b:
        assert row["status"] == "ok", row["message"]
        assert "peak_rss_bytes, window_peak_rss_bytes include both compare variants" in row["telemetry_note"]


def test_on_one_gpu_a_variants_peak_leaves_out_what_the_other_holds():
    from bench_core.scenarios.compare import own_memory
    gib = 2**30
    row = {"status": "ok", "peak_mem_allocated_bytes": 5 * gib, "telemetry_note": None}
    own_memory(row, other_held=2 * gib, one_device=True)  # B's weights and optimizer state sat on the GPU
    assert row["peak_mem_allocated_bytes"] == 3 * gib
    assert "without the other compare variant's 2048 MiB" in row["telemetry_note"]
    assert "peak_mem_reserved_bytes, gpu_mem_used_bytes include both" in row["telemetry_note"]
    apart = {"status": "ok", "peak_mem_allocated_bytes": 5 * gib, "telemetry_note": None}
    own_memory(apart, other_held=2 * gib, one_device=False)  # the other variant is on another GPU
    assert apart["peak_mem_allocated_bytes"] == 5 * gib and "reserved" not in apart["telemetry_note"]
