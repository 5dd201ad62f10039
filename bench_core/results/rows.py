"""The row schema: one documented column list, the statuses, and how a row is made.

Every row starts from `run_fields(cfg)` (who ran what) and ends in `finish_row`; a row that
says why there is no measurement is `failure_row`. Plain data: no torch is imported here.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import math
import uuid

from bench_core.config.schema import BenchConfig
from bench_core.errors import error_message  # noqa: F401 - re-exported: rows and notes say exceptions so
from bench_core.results.keys import WORKLOAD, machine_label  # noqa: F401 - re-exported (their home is keys.py)
from bench_core.results.serving_columns import SERVING_COLUMNS

# 2: max_batch_size, batch_margin (batch_size may be 'max'); batch_search lists every probe
# 3: precision_support (native | emulated) and its reason, the CPU's dispatch facts, mfu_rejected,
#    tf32_flags, nccl_version
# 4: params_count
# 5: text workloads: task, sample_unit, throughput and throughput_unit, tokens_per_s, generate's phases
#    (ttft, prefill and decode rates, inter-token latency, output tokens, KV cache), attn_implementation,
#    attention_kernel, flops_method, flops_per_sample_counted, cost_per_million; power_method (how
#    power_w_mean was measured); slurm_job_id, slurm_array_task_id, slurm_node, slurm_restart_count,
#    slurm_exclusive (rows run under SLURM); recommendation: num_tables, rows_per_table, embedding_dim,
#    indices_per_lookup, zipf_exponent, embedding_table_bytes, embedding_bytes_per_s, mfu_note; diffusion
#    and speech workloads: latent_size, denoise_steps, audio_frames, denoise_steps_per_s, images_per_s,
#    audio_s_per_s, diffusers_version; bytes_per_sample_flop_ops and _other_ops (`bench predict`)
# 6: mode serve (bench_core/serving): the serve config fields, and SERVING_COLUMNS (serving_columns.py:
#    engine version and command, request and token throughput, TTFT / TPOT / ITL / e2e percentiles, goodput, the client's load);
#    output_check and its columns (a variant's outputs against fp32 eager NCHW)
#    the memory estimate (mem_estimate_bytes, mem_estimate, mem_before_build_bytes) and sharded training
#    (parallelism, tp_degree, activation_checkpointing, mesh_shape, mixed_precision, warmup_losses,
#    throughput_per_device, exposed_comm_share, exposed_comm_method); fp8: float8_linears, mfu_bf16_peak,
#    peak_tflops_bf16; serve: shared_prefix_len, energy_j_per_output_token; timed_s_host and
#    power_w_sampled (the checks of `bench acceptance`: the window on the host clock, NVML's power samples)
# 7: model_code_path, model_code_sha256, model_code_commit (a model from your code); 8: serving traffic's
#    fields and figures (traffic, *_tokens_mean, send_lag_ms_p99, ttft_ms_p50_by_turn, ...); ops_per_step
# 9: gpu_busy, gpu_busy_method (host-bound rows), power_limit_w (power-capped rows), op_profile (the ops' table)
#    reference_ops_per_step and precision_note (float8: its amp-bf16 twin's ops a step; why an eager fp8 row is
#    slow); compile records the mode that ran (fp8 precisions compile by default)
#    phase_times_s (where a configuration's time went outside its timed windows: a sweep's timing.json)
# 10: a model from your code is named without its file's hash (code:<file>:<function>; model_code_sha256 holds
#    the hash): one model across edits. Older rows' code:<file>:<function>@<hash> is read as the same model
# 11: cpu_steal_cores (the hypervisor's steal time over the window; the cpu-steal flag)
SCHEMA_VERSION = 11
STATUSES = ("ok", "oom", "nan", "error", "unsupported", "crashed", "timeout", "interrupted")


# (column, description). Config fields are inserted after the identity block.
_IDENTITY = [
    ("schema_version", "version of this column list"),
    ("run_id", "unique id of the run (one process running one config)"),
    ("timestamp", "UTC time the row was made, ISO 8601"),
    ("config_hash", "hash of the config as requested (batch_size max included): the same config has the same hash"),
    ("repeat", "repeat index, 0-based"),
    ("status", "ok | oom | nan | error | unsupported | crashed | timeout | interrupted"),
    ("message", "why, when status is not ok"),
]


_MEASURED = [
    ("batch_size_requested", "per-device batch size asked for ('max': found by an explicit search, see batch_search)"),
    ("batch_size_actual", "per-device batch size that ran"),
    ("batch_search", "with batch_size max: the search's one line (largest that ran, first that failed, every probe)"),
    ("global_batch_size", "batch_size_actual x world_size"),
    ("world_size", "number of worker processes (devices)"),
    ("dist_backend", "nccl | gloo | empty for one process"),
    ("device_type", "cpu | cuda | mps"),
    ("device_name", "GPU name, or the CPU model"),
    ("device_count", "devices of that type on this host"),
    ("precision_support", "native | emulated: whether this device runs the precision in hardware (bench sysinfo)"),
    ("data", "always 'synthetic': random tensors made once on the device"),
    ("task", "what the model is run for: classification, segmentation, detection, instance-segmentation, "
             "volumetric, masked-lm, causal-lm, seq2seq-lm, recommendation, diffusion, speech-to-text, custom "
             "(a model from your code: model is then code:<file>:<function>, the same across edits of the file)"),
    ("model_code_path", "a model from your code (code:...): the file it was read from"),
    ("model_code_sha256", "a model from your code: the sha256 of that file's content (the model keeps its name "
                          "across edits: this says which version ran)"),
    ("model_code_commit", "a model from your code: the git commit holding the file ('-dirty': the file differs)"),
    ("input_shape", "one sample: 3x224x224 (an image), 1x64x64x64 (a volume), '128 tokens' (a sequence), "
                    "'prompt 256 + 64 new tokens' (a generation), '4x64x64 latent (512 px)' (a diffusion "
                    "model's; in infer with ', CFG, 50 steps'), '3000 frames (30 s) + 128 tokens' (an utterance)"),
    ("params_count", "parameters of the model as built (sum of numel over model.parameters(), as timm's "
                     "benchmark.py counts); empty when the model was never built"),
    ("timed_steps", "steps in the timed window"),
    ("timed_s", "wall seconds of the timed window (slowest rank)"),
    ("timed_s_host", "the same window on the host clock, from just before its first mark to just after the final "
                     "synchronize: on CUDA timed_s comes from device events, and the two agree to within the launch "
                     "queue (bench acceptance checks 2 %)"),
    ("samples_per_s", "global batch x timed steps / timed seconds; a sample is what sample_unit says (an image, "
                      "a volume, a sequence, a recommendation example)"),
    ("sample_unit", "what samples_per_s counts: images/s, volumes/s, sequences/s, samples/s, utterances/s, or "
                    "denoising steps/s (diffusion infer: one image advanced one denoising step)"),
    ("throughput", "the rate in the workload's own unit (throughput_unit): samples_per_s for images, volumes, "
                   "recommendation examples and denoising steps, tokens_per_s for text and speech generate, "
                   "audio_s_per_s for speech train and infer"),
    ("throughput_unit", "images/s | volumes/s | tokens/s | samples/s | denoising steps/s | audio s/s: what a table "
                        "or chart of throughput is in (never mixed on one axis)"),
    ("tokens_per_s", "text: global batch x seq_len x timed steps / timed seconds in train and infer (every token of "
                     "the sequence); text and speech in generate, the output tokens: global batch x new_tokens x "
                     "calls / timed seconds (prompt tokens not counted)"),
    ("embedding_bytes_per_s", "recommendation: embedding bytes moved per second, samples_per_s x bytes per sample "
                              "counted as FBGEMM's embedding benchmark does: num_tables x embedding_dim x element "
                              "size x (indices_per_lookup rows read + 1 pooled row written) in infer, 3 times that "
                              "in train (the backward reads and writes the looked-up rows); what the lookups need, "
                              "not measured traffic"),
    ("embedding_table_bytes", "recommendation: bytes of all embedding tables (num_tables x rows_per_table x "
                              "embedding_dim x element size); also on a run that failed to build them"),
    ("denoise_steps_per_s", "diffusion infer: images advanced one denoising step per second, global batch x timed "
                            "steps / timed seconds; a step is one denoiser call on 2 x batch latents (classifier-"
                            "free guidance: conditional and unconditional halves) and the guidance; at batch 1 a "
                            "pipeline's it/s"),
    ("images_per_s", "diffusion infer: images per second at denoise_steps steps each, denoise_steps_per_s / "
                     "denoise_steps: the denoiser's share only (no text encoder, VAE decode or scheduler update)"),
    ("audio_s_per_s", "speech: seconds of audio per second, global batch x audio_frames / 100 x timed steps / timed "
                      "seconds; in generate, of whole transcriptions (encoder and new_tokens tokens: the inverse "
                      "real-time factor)"),
    ("samples_per_s_per_device", "samples_per_s / world_size"),
    ("throughput_per_device", "throughput / world_size: the rate per device in throughput_unit (tokens/s per GPU, as "
                              "torchtitan reports)"),
    ("batches_per_s", "timed steps x world size / timed seconds"),
    ("mpx_per_s", "width x height x global batch x steps / (seconds x 1e6); 2D models"),
    ("mvox_per_s", "depth x height x width x global batch x steps / (seconds x 1e6); 3D models"),
    ("s_per_iter", "timed seconds / timed steps"),
    ("step_time_ms_median", "median step time, ms"),
    ("step_time_ms_mean", "mean step time, ms"),
    ("step_time_ms_std", "standard deviation of step times, ms"),
    ("step_time_ms_p5", "5th percentile step time, ms"),
    ("step_time_ms_p95", "95th percentile step time, ms"),
    ("step_time_cv", "std / mean of step times"),
    ("step_times_ms", "every step time of the window, ms, space separated"),
    ("output_tokens", "generate: new tokens each sequence got in every call, counted from the token marks (always "
                      "new_tokens: a call that produces another count is an error)"),
    ("ttft_ms_median", "generate: time to first token, ms: from a call's start to its first token's mark (the "
                       "prefill: one forward over the prompt, with the first token chosen); median over the "
                       "window's calls"),
    ("ttft_ms_p95", "generate: 95th percentile of the time to first token over the window's calls, ms"),
    ("prefill_tokens_per_s", "generate: prompt tokens per second of prefill: global batch x prompt_len x calls / "
                             "the calls' summed time to first token"),
    ("decode_s", "generate: seconds of decoding in the window: each call's first token's mark to its end, summed "
                 "(time to first token + decode = the call's time)"),
    ("decode_tokens_per_s", "generate: global batch x (new_tokens - 1) x calls / decode_s: the tokens after the "
                            "first, per second of decoding"),
    ("itl_ms_median", "generate: inter-token latency, ms: median of the gaps between successive tokens' marks (one "
                      "decode step each), over the window"),
    ("itl_ms_p95", "generate: 95th percentile inter-token latency, ms"),
    ("kv_cache_bytes", "generate: bytes of the KV cache at the end of a call (keys and values of every layer, all "
                       "sequences of the batch)"),
    ("attn_implementation", "text and speech: transformers' attention implementation (sdpa, eager, ...); diffusion: "
                            "sdpa when every attention processor is diffusers' AttnProcessor2_0, else their names"),
    ("attention_kernel", "the fused scaled-dot-product-attention kernel torch ran (flash, efficient, cudnn, "
                         "flash (cpu)), seen in the counted step; 'math (no fused kernel)' when SDPA ran without "
                         "one; empty without SDPA"),
    ("first_step_ms", "the first (cold) step, untimed for throughput, ms"),
    ("compile_s", "torch.compile time (first compiled step), s; empty when compile is off"),
    ("warmup_s", "seconds of the untimed warm-up steps"),
    ("phase_times_s", "where the configuration's process spent its time, each phase timed as it happened, "
                      "seconds as name=seconds: environment, capability, memory_estimate, output_check, build (the "
                      "model, casts, workload), peak, first_step, flop_count, warmup, windows (the timed windows on "
                      "the host clock), window_edges (telemetry's start and stop, the row), gpu_busy (a GPU's "
                      "profile of a few steps after the windows), after_windows (profiles), release; the same in "
                      "every row of the configuration"),
    ("peak_mem_allocated_bytes", "torch peak allocated memory on the device (CUDA)"),
    ("peak_mem_reserved_bytes", "torch peak reserved memory on the device (CUDA)"),
    ("peak_rss_bytes", "peak resident memory of the process in the window (Linux: its high-water mark, reset as the "
                       "window begins; elsewhere the lifetime peak)"),
    ("mem_estimate_bytes", "bytes one rank was estimated to need at its peak before anything was allocated: one "
                           "step run on fake tensors (no memory), every tensor counted until freed: parameters, "
                           "gradients, optimizer state, the activations autograd keeps (in half precision where "
                           "the device's autocast makes them so), transients; generate and serve add the KV "
                           "cache; divided as the parallelism divides them (see mem_estimate). Where the step "
                           "cannot be traced, parameters and the activations the family states. Compare with "
                           "peak_mem_allocated_bytes (CUDA; workspaces and the allocator's cache not counted) or "
                           "peak_rss_bytes (CPU: it also counts the process's libraries)"),
    ("mem_estimate", "the estimate's terms in GiB at the peak and how each was found (the phase the peak is in, "
                     "the KV cache's sequences and positions, what a trace left out)"),
    ("mem_before_build_bytes", "memory in use just before the model was built, what the peak columns count from: "
                               "torch's allocated bytes (CUDA), the process's RSS (CPU); the peak minus this is "
                               "what the run added, to set beside mem_estimate_bytes"),
    ("float8_linears", "fp8 precisions: linear layers torchao converted to float8 training (both dimensions divisible "
                       "by 16; the output layer stays bf16)"),
    ("mesh_shape", "the device mesh of a multi-process run: dp_replicate=N (DDP), dp_shard=N (FSDP), "
                   "dp_replicate=R x dp_shard=S (HSDP), dp_shard=S x tp=T (FSDP with tensor parallel)"),
    ("mixed_precision", "how a multi-process training run holds and reduces parameters and gradients: FSDP's "
                        "MixedPrecisionPolicy (bf16 parameters, fp32 reductions), a pure cast, autocast or none"),
    ("exposed_comm_share", "multi-process training: the share of a step's wall time in which a collective ran and "
                           "no compute did (not hidden behind compute), from torch.profiler over one extra step after "
                           "the windows, mean over ranks (see exposed_comm_method)"),
    ("exposed_comm_method", "how exposed_comm_share was measured (CUDA: nccl kernels against the other kernels; CPU: "
                            "gloo's collective threads against the training thread's operators), or why it is empty"),
    ("warmup_losses", "train: the loss of each untimed step before the window (first step, FLOP-count step, "
                      "warm-up), averaged over the ranks: a sharded run's agree with one process's on the same "
                      "seed and global batch"),
    ("window_peak_rss_bytes", "largest RSS sampled during the timed window (telemetry)"),
    ("loss_final", "last loss of the window (train)"),
    ("loss_finite", "the last loss / output of the window was finite"),
    ("output_check", "a variant's outputs against its reference (fp32 eager NCHW; float8: its first training "
                     "losses against amp-bf16 eager's; same weights and inputs), checked "
                     "once per configuration outside the timed window on at most 16 samples a side: within "
                     "tolerance | wrong results | not checked: why; empty for the reference itself "
                     "(results/fidelity.py)"),
    ("output_reference", "what the outputs were checked against: fp32 eager NCHW, or amp-bf16 eager (float8), and "
                         "the layers re-drawn at random on both sides because they were zero at initialisation"),
    ("output_tolerance", "the precision's tolerance: minimum cosine similarity and maximum relative error (float8: "
                         "the training losses compared and how far each may be off)"),
    ("output_cosine", "cosine similarity of the variant's forward outputs to the reference's (all floating-point "
                      "outputs flattened, float64); empty when non-finite"),
    ("output_rel_error", "relative L2 error of the variant's forward outputs: ||variant - reference|| / ||reference||; "
                         "empty when non-finite"),
    ("loss_rel_error", "train: difference of the first training step's loss from the reference's, relative to it "
                       "(float8: the largest over its first 3 steps, relative to the reference's first loss)"),
    ("reference_ops_per_step", "float8 rows: ops a step of the output check's reference, the same model in amp-bf16 "
                               "eager, counted as ops_per_step is: what an eager fp8 step's ops are set against"),
    ("precision_note", "why this precision's figure is what it is: an fp8 row run eager (compile off asked for) "
                       "says its ops a step against amp-bf16's, and that float8 is meant to be compiled"),
    ("tf32_enabled", "TF32 allowed for fp32 matmul and conv, as torch reads it back after setting it"),
    ("tf32_flags", "every TF32 accessor read back after setting (legacy allow_tf32 / matmul precision and the "
                   "fp32_precision strings)"),
    ("cudnn_benchmark_enabled", "torch.backends.cudnn.benchmark as set"),
    ("threads", "torch intra-op threads during the run"),
    ("replicas_in_sync", "DDP train: every rank's parameters bitwise equal after the window (sha256); empty otherwise"),
    ("profile_trace", "path of the torch.profiler chrome trace (with --profile; taken after the window)"),
    ("profile_top_ops", "path of the top-operators table of that profile"),
]


_EFFICIENCY = [
    ("power_w_mean", "mean power of one device over the window, W (NVML)"),
    ("power_w_max", "max power of one device over the window, W (NVML)"),
    ("power_limit_w", "the GPU's enforced power limit, W (NVML): the cap a power-capped row ran at"),
    ("energy_j", "energy of one device over the window, J"),
    ("power_w_sampled", "mean of the power samples taken during the window, W (NVML power readings; RAPL has none): "
                        "beside power_w_mean when that is the energy counter's, energy_j / timed_s, a check of "
                        "one against the other"),
    ("energy_method", "nvml-counter | power-integration | rapl (empty when unknown)"),
    ("power_method", "what power_w_mean is: energy-counter (energy_j / window seconds) | nvml-instant (mean of "
                     "NVML_FI_DEV_POWER_INSTANT samples) | nvml-power-usage (nvmlDeviceGetPowerUsage samples: a 1 s "
                     "average on Ampere and newer, A100 excepted) | rapl-counter"),
    ("gpu_util_pct_mean", "mean GPU utilization, % (NVML: the share of time a kernel ran, sampled)"),
    ("gpu_busy", "GPU rows: the GPU's kernel time per step (torch.profiler over a few steps after the window, on "
                 "the GPU's clock) / the window's mean step, 0-1; below 0.5 the row is host-bound (noise_flags)"),
    ("gpu_busy_method", "how gpu_busy was measured, or why it is empty (a CPU row, no CUPTI, a failed profile)"),
    ("op_profile", "GPU rows of an eager step: its ops from gpu_busy's profile as a compact table (per kind of op: calls, "
                   "measured time, FLOPs, bytes, cache reuse; JSON, measure/op_table.py): `bench predict`'s per-op path"),
    ("sm_clock_mhz_mean", "mean SM clock, MHz"),
    ("sm_clock_mhz_min", "min SM clock, MHz"),
    ("gpu_mem_used_bytes", "device memory used (NVML, includes the CUDA context and other processes)"),
    ("gpu_temp_c_max", "max GPU temperature, C"),
    ("throttle_reasons", "clock-event reasons seen during the window"),
    ("cpu_util_pct_mean", "process CPU utilization, % of one core"),
    ("cpu_steal_cores", "steal time over the window in cores: seconds in which the hypervisor ran someone else on "
                        "the cores this process may use while they had work (/proc/stat), / window seconds; above "
                        "a stated threshold the row is flagged cpu-steal (measure/noise.py STEAL_CPU_CORES); empty "
                        "where /proc/stat or its steal field is missing"),
    ("telemetry_note", "why telemetry columns are empty"),
    ("flops_per_sample", "FLOPs per sample per step that achieved_tflops and MFU use (1 MAC = 2 FLOPs; train = fwd "
                         "+ bwd): the task's formula where it has one (text), else counted (flops_method); "
                         "diffusion infer: per image-step, both guidance halves"),
    ("flops_method", "how flops_per_sample was found: counted (FlopCounterMode over one step, grouped-conv "
                     "backward corrected, CPU attention counted) or the formula (text: 6N + 12·L·H·Q·T per "
                     "trained token, 2N + 4·L·H·Q·T per forward token; PaLM appendix B)"),
    ("flops_per_sample_counted", "FLOPs per sample FlopCounterMode counted over one step: beside a formula's "
                                 "figure, so a reader can see the two agree"),
    ("bytes_per_sample_flop_ops", "bytes the ops that count FLOPs (matmuls, convs, attention) read and write per "
                                  "sample in one step, nothing fused or cached (their tensor inputs and outputs; "
                                  "the per-step weights spread over the batch): `bench predict`'s memory term"),
    ("bytes_per_sample_other_ops", "bytes all other ops (elementwise, norms, ...) move per sample in one step, likewise"),
    ("ops_per_step", "ops one eager step ran that are not views (on a GPU, a kernel each): `bench predict`'s launch floor"),
    ("achieved_tflops", "flops_per_sample x samples_per_s / 1e12"),
    ("peak_tflops", "dense peak TFLOP/s per device for the precision used"),
    ("peak_source", "where the peak comes from (datasheet, or 'measured' on CPU)"),
    ("mfu", "achieved_tflops / (peak_tflops x world_size); empty when above 1 (see mfu_rejected) or where the task "
            "says MFU does not apply (mfu_note)"),
    ("mfu_bf16_peak", "fp8 rows: achieved_tflops / (the BF16 dense peak x world_size), beside mfu (against the FP8 "
                      "dense peak): the field disagrees which peak fp8 MFU divides by, so both are stated"),
    ("peak_tflops_bf16", "fp8 rows: the BF16 dense peak TFLOP/s per device that mfu_bf16_peak divides by"),
    ("mfu_note", "why mfu is empty by the task's own account (recommendation: memory-bound embedding lookups "
                 "have almost no FLOPs; see embedding_bytes_per_s)"),
    ("mfu_rejected", "an MFU above 1, not shown as mfu: the peak it divides by is too low (flagged)"),
    ("samples_per_j", "per-device samples in the window / device energy_j (or / power_w_mean)"),
    ("j_per_1k_samples", "joules per 1000 samples"),
    ("samples_per_s_per_w", "samples_per_s_per_device / power_w_mean"),
    ("cost_per_million_samples", "price_per_hour x devices / (samples_per_s x 3600) x 1e6"),
    ("cost_per_million", "price_per_hour x devices / (throughput x 3600) x 1e6: the price of a million of "
                         "throughput_unit's items (images, volumes, tokens)"),
    ("noise_flags", "reasons this row may be disturbed (noisy window, repeats that disagree, throttling, other processes, "
                    "the hypervisor's steal) and what bound it, not a disturbance (host-bound, power-capped)"),
]


_ENVIRONMENT = [
    ("host", "host name"), ("os", "operating system"), ("python_version", "Python version"),
    ("cpu_model", "CPU model"), ("cpu_count", "logical CPUs"), ("torch_threads", "torch default threads"),
    ("torch_version", "torch"), ("torchvision_version", "torchvision"), ("timm_version", "timm"),
    ("smp_version", "segmentation-models-pytorch"), ("transformers_version", "transformers"),
    ("diffusers_version", "diffusers"), ("cuda_version", "CUDA runtime of torch"),
    ("cudnn_version", "cuDNN"), ("nccl_version", "NCCL of torch (CUDA only; must match across nodes)"),
    ("driver_version", "NVIDIA driver"), ("gpu_count", "GPUs visible"),
    ("gpu_name", "GPU name"), ("gpu_uuid", "GPU UUID"), ("gpu_memory_bytes", "GPU memory"),
    ("gpu_compute_capability", "compute capability"), ("rank_devices", "every rank's device"),
    ("precision_support_reason", "why the precision is native or emulated on this device"),
    ("cpu_isa_dispatch", "torch's CPU dispatch level (AVX512, AVX2, ...)"),
    ("cpu_dtype_flags", "the CPU's bf16/fp16 ISA flags (avx512_bf16, amx_bf16, avx512_fp16, ...)"),
    ("cpu_dispatch_env", "ATEN_CPU_CAPABILITY / ONEDNN_MAX_CPU_ISA / BENCH_CPU_AS when set"),
    ("project_version", "notebook-bench version"), ("git_commit", "project commit"),
    ("slurm_job_id", "SLURM job id (of the array, for an array task); empty outside SLURM"),
    ("slurm_array_task_id", "SLURM array task id (bench slurm: one task per sweep execution)"),
    ("slurm_node", "SLURM node the row's writer ran on (rank_devices names every rank's host)"),
    ("slurm_restart_count", "times SLURM requeued the job (preemption, scontrol requeue) before this row"),
    ("slurm_exclusive", "true: the job had its nodes alone (bench slurm's default); false: it shared them "
                        "(bench slurm --share), so other jobs may have disturbed it; empty: not known"),
]


def environment_columns() -> list[str]:
    """The environment block of the schema: host, OS, CPU, library versions, GPU, driver."""
    return [name for name, _ in _ENVIRONMENT]


def _config_columns() -> list[tuple[str, str]]:
    return [(f.name, f"config: {f.metadata['help']}") for f in dataclasses.fields(BenchConfig)]


def schema() -> list[tuple[str, str]]:
    return _IDENTITY + _config_columns() + _MEASURED + SERVING_COLUMNS + _EFFICIENCY + _ENVIRONMENT


def columns() -> list[str]:
    return [name for name, _ in schema()]


def first_line(text: str, limit: int = 500) -> str:
    """The first line of a message, cut to `limit` characters: a row's message is one line."""
    lines = str(text).strip().splitlines()
    return lines[0][:limit] if lines else ""


def make_row(**values) -> dict:
    """A full row: every column present (None when unknown); unknown names refused."""
    names = columns()
    unknown = set(values) - set(names)
    if unknown:
        raise KeyError(f"not in the result schema: {sorted(unknown)}")
    row = {name: None for name in names}
    row.update(values)
    row["schema_version"] = SCHEMA_VERSION
    return row


def new_run_id(cfg: BenchConfig, suffix: str | None = None) -> str:
    """`<UTC stamp>-<config hash>-<suffix or 6 random hex digits>`: sortable and unique."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{stamp}-{cfg.config_hash()}-{suffix or uuid.uuid4().hex[:6]}"


def run_fields(cfg: BenchConfig, **more) -> dict:
    """The columns every row of one run of `cfg` starts from: its id and what was asked for."""
    return {"run_id": new_run_id(cfg), "config_hash": cfg.config_hash(), **cfg.to_dict(),
            "batch_size_requested": cfg.batch_size, "data": "synthetic", "world_size": cfg.world_size, **more}


def finish_row(row: dict) -> dict:
    """Stamp the time, turn NaN into an empty cell and check every column against the schema."""
    row["timestamp"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    return make_row(**{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()})


def failure_row(fields: dict, status: str, message: str) -> dict:
    """The one row of a run that has no measurement, and why (`fields`: run_fields(...) and
    whatever else is known, e.g. the environment)."""
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}")
    return finish_row({**fields, "repeat": 0, "status": status, "message": message})
