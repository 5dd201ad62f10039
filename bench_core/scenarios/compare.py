"""`bench compare`: two variants of one workload, interleaved (A B A B ...), and a verdict with its confidence interval.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from bench_core.config.schema import MAX_BATCH, BenchConfig, check_known_keys
from bench_core.config.values import check_int
from bench_core.devices import Backend, resolve_device
from bench_core.errors import EXIT_DISTURBED, EXIT_FAILED, EXIT_OK, ConfigError
from bench_core.results.bound import comparison_note
from bench_core.results.disturbed import disturbances
from bench_core.results.comparison import CONFIDENCE, DISTURBED, geometric_mean
from bench_core.results.under_load import LOAD_FLAGS, compare_rounds, load_cores
from bench_core.results.fidelity import WRONG_RESULTS, deviation_text, is_wrong
from bench_core.run import busy
from bench_core.run.runner import Progress, Session

# Keys that make no sense per variant in one interleaved process.
_NOT_PER_VARIANT = ("repeats", "nproc_per_node", "nnodes", "node_rank", "rdzv_endpoint", "profile")


@dataclass
class Comparison:
    label_a: str
    label_b: str
    config_a: dict
    config_b: dict
    rounds: int
    tolerance: float
    order: list[str] = field(default_factory=list)           # "AB" or "BA" per round
    samples_per_s_a: list[float] = field(default_factory=list)
    samples_per_s_b: list[float] = field(default_factory=list)
    disturbed: list[str] = field(default_factory=list)       # per round: its rows' disturbing flags ('' none)
    load_cores: list[list[float]] = field(default_factory=list)  # per round: other processes' cores in A's, B's window
    under_load: str = ""                # the verdict was measured beside other processes (results.under_load), said so
    mean_a: float | None = None         # geometric mean samples/s over the judged (undisturbed) rounds
    mean_b: float | None = None
    ratio: float | None = None          # B / A throughput: mean_b / mean_a (= the geometric mean of round ratios)
    ci_low: float | None = None
    ci_high: float | None = None
    verdict: str | None = None          # results.comparison's verdicts, WRONG_RESULTS | None (a variant failed)
    reason: str = ""
    outputs_a: str = ""                 # each variant's output check against fp32 eager (results.fidelity)
    outputs_b: str = ""
    rows_a: list[dict] = field(default_factory=list, repr=False)
    rows_b: list[dict] = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        return self.verdict is not None and self.verdict not in (WRONG_RESULTS, DISTURBED)

    @property
    def exit_status(self) -> int:
        """bench compare's: 0 a speed verdict; 1 a variant failed or computes wrong results; 3 (as
        bench diff) its rounds were too disturbed to judge."""
        if self.verdict == DISTURBED:
            return EXIT_DISTURBED
        return EXIT_OK if self.ok else EXIT_FAILED

    @property
    def judged(self) -> list[int]:
        """The rounds the verdict rests on: those without a disturbing flag, or, measured under load, those
        disturbed by other processes alone too."""
        if self.under_load:
            return [i for i, flags in enumerate(self.disturbed)
                    if not flags or all(f.strip() in LOAD_FLAGS for f in flags.split(","))]
        return [i for i, flags in enumerate(self.disturbed) if not flags]

    def to_dict(self) -> dict:
        """The comparison without its rows (those go to the results store)."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if k not in ("rows_a", "rows_b")}
        out["confidence"] = CONFIDENCE
        out["run_id_a"] = self.rows_a[0]["run_id"] if self.rows_a else None
        out["run_id_b"] = self.rows_b[0]["run_id"] if self.rows_b else None
        return out

    def format(self) -> str:
        c = self.config_a
        head = (f"compare {c['model']} {c['mode']} {c['precision']} batch {c['batch_size']} "
                f"{c['width']}x{c['height']} on {c['device']}: {self.rounds} rounds, interleaved (AB BA AB ...)")
        judged = self.judged
        lines = [head, f"  {'variant':30s} {'samples/s':>10s} {'step ms':>9s} {'first step ms':>14s} "
                       f"{'compile s':>10s}  outputs"]
        for name, label, rows, outputs in (("A", self.label_a, self.rows_a, self.outputs_a),
                                           ("B", self.label_b, self.rows_b, self.outputs_b)):
            ok = [r for r in rows if r["status"] == "ok"]
            if not ok:
                lines.append(f"{name} {label:30s} {rows[0]['status'] if rows else 'not run'}: "
                             f"{rows[0]['message'] if rows else ''}")
                continue
            first, mean = ok[0], self.mean_a if name == "A" else self.mean_b
            step_ms = geometric_mean([ok[i]["step_time_ms_median"] for i in judged if i < len(ok)])
            lines.append(f"{name} {label:30s} {number(mean, 10)} {number(step_ms, 9)} "
                         f"{first['first_step_ms'] or 0:14.1f} "
                         f"{'' if first['compile_s'] is None else format(first['compile_s'], '.1f'):>10s}  "
                         f"{outputs or 'the reference (fp32 eager NCHW): not checked'}")
        if self.order:
            rounds = ("undisturbed or disturbed by other processes alone (judged under load)" if self.under_load
                      else "without a disturbing flag")
            lines.append(f"samples/s and step ms: geometric means over the {len(judged)} of {len(self.order)} rounds "
                         f"{rounds}, the rounds the verdict rests on" if judged else
                         "samples/s and step ms: none, every round carries a disturbing flag")
        if self.samples_per_s_a:
            lines.append(f"{'round':>5s} {'order':>5s} {'A samples/s':>12s} {'B samples/s':>12s} {'B/A':>7s}  "
                         f"disturbed by")
            for i, (order, a, b) in enumerate(zip(self.order, self.samples_per_s_a, self.samples_per_s_b)):
                flags = self.disturbed[i] if i < len(self.disturbed) else ""
                kept = "judged under load" if i in judged else "left out"
                lines.append(f"{i + 1:5d} {order:>5s} {a:12.4g} {b:12.4g} {b / a:7.3f}  "
                             f"{f'{flags}: {kept}' if flags else '-'}".rstrip())
        lines += [f"{name}: {rows[0]['precision_note']}" for name, rows in (("A", self.rows_a), ("B", self.rows_b))
                  if rows and rows[0].get("precision_note")]  # an eager fp8 variant says why it is slow
        mixed = mixed_settings(self.config_a, self.config_b)
        if mixed:
            lines.append(mixed)
        emulated = self.emulated()
        if self.verdict and self.ci_low is not None:
            loaded = ", MEASURED UNDER LOAD" if self.under_load else ""
            lines.append(f"B/A throughput = {self.ratio:.3f} ({CONFIDENCE:.0%} CI {self.ci_low:.3f} to "
                         f"{self.ci_high:.3f}, {len(judged)} rounds{loaded}): {self.verdict.upper()} - {self.reason}"
                         f"{emulated}")
        elif self.verdict:
            lines.append(f"B/A throughput: {self.verdict.upper()} - {self.reason}{emulated}")
        else:
            lines.append(f"no verdict: {self.reason}")
        return "\n".join(lines)

    def emulated(self) -> str:
        """'; emulated on this CPU: amp-bf16 (B): not what a GPU would show', or '': a verdict on an
        emulated precision describes the emulation, and must say so where it is read."""
        found = [f"{rows[0]['precision']} ({name})" for name, rows in (("A", self.rows_a), ("B", self.rows_b))
                 if rows and rows[0].get("precision_support") == "emulated"]
        if not found:
            return ""
        device = self.rows_a[0].get("device_type") if self.rows_a else None
        where = "this CPU" if device == "cpu" else "this device"
        return f"; emulated on {where}: {', '.join(found)}: not what a GPU would show"


def pair_compile(cfg_a: BenchConfig, cfg_b: BenchConfig, given: bool) -> tuple[BenchConfig, BenchConfig, str]:
    """Two precisions are compared under one compile setting. Where compile was given nowhere and one
    variant's precision compiles by default (float8) while the other's does not, both compile in that
    mode -> (A, B, the note that says so); otherwise (A, B, '') as they are (given different compile
    settings, the verdict's text says it judges both changes: mixed_settings)."""
    if given or cfg_a.precision == cfg_b.precision or cfg_a.compile == cfg_b.compile:
        return cfg_a, cfg_b, ""
    compiled = cfg_a if cfg_a.compile != "off" else cfg_b
    mode = compiled.compile
    return cfg_a.replace(compile=mode), cfg_b.replace(compile=mode), (
        f"compile={mode} for A and B: {compiled.precision} compiles by default, and two precisions are compared "
        "under one compile setting (--compile off compares them eager)")


def mixed_settings(config_a: dict, config_b: dict) -> str:
    """'' unless A and B differ in precision and in compile: then the line saying the verdict judges both."""
    compile_a, compile_b = config_a.get("compile") or "off", config_b.get("compile") or "off"  # (older files: none)
    if config_a.get("precision") == config_b.get("precision") or compile_a == compile_b:
        return ""
    return (f"A and B differ in precision and in compile (A {config_a['precision']} compile={compile_a}, "
            f"B {config_b['precision']} compile={compile_b}): B/A is of both changes together, not of the "
            "precision alone")


def number(value: float | None, width: int) -> str:
    return f"{value:{width}.4g}" if value is not None and value == value else f"{'-':>{width}s}"


def compare(cfg_a: BenchConfig, cfg_b: BenchConfig, rounds: int = 8, tolerance: float = 0.02,
            labels: tuple[str, str] = ("as configured", "as configured"),
            progress: Progress | None = None) -> Comparison:
    """Build A and B once each, then alternate their timed windows: AB, BA, AB, ...

    Each round is one window (cfg.steps / cfg.min_seconds) per variant; the order flips every
    round so drift and "who runs second" cancel. Ratio = B/A samples/s, paired per round; rounds
    with a disturbing flag on either side are left out (too few left: 'disturbed: re-measure'). A
    variant whose outputs are outside its precision's tolerance of fp32 eager (checked once, as it
    is built) makes the verdict 'wrong results', with no speed verdict.
    """
    import torch
    rounds = check_int("rounds", rounds, 2)
    if not 0.0 <= tolerance < 1.0:
        raise ConfigError("tolerance", f"must be a fraction in [0, 1), got {tolerance!r}")
    for cfg in (cfg_a, cfg_b):
        if cfg.batch_size == MAX_BATCH:
            raise ConfigError("batch_size", "compare needs a number for both variants (find the largest with "
                                            "bench find-batch)")
        if cfg.world_size > 1:
            raise ConfigError("nproc_per_node", "compare runs both variants in one process; use nproc_per_node 1")
        if cfg.profile:
            raise ConfigError("profile", "compare does not profile (profile with `bench run --profile`)")
    # Each variant's windows are its repeats: its rows and progress count `rounds` of them.
    cfg_a, cfg_b = cfg_a.replace(repeats=rounds), cfg_b.replace(repeats=rounds)
    say = progress or (lambda msg: None)
    result = Comparison(labels[0], labels[1], cfg_a.to_dict(), cfg_b.to_dict(), rounds, tolerance)
    if cfg_a.compile != "off" or cfg_b.compile != "off":
        import torch._dynamo
        torch._dynamo.reset()  # compile from scratch, as a fresh process would
    default_threads = torch.get_num_threads()
    sessions = {"A": Session(cfg_a, say, default_threads), "B": Session(cfg_b, say, default_threads)}
    rows = {"A": result.rows_a, "B": result.rows_b}
    held: dict[str, int | None] = {}  # what each variant keeps on its device between windows
    try:
        for name, session in sessions.items():
            say(f"compare: building, checking and warming up {name} ({labels['AB'.index(name)]})")
            before = _allocated_now(session.cfg)
            if not session.open():
                rows[name].append(session.failure)
                result.reason = f"{name} failed to start: {session.failure['status']}: {session.failure['message']}"
                return result
            now = session.backend.allocated_bytes()
            held[name] = None if now is None else max(now - (before or 0), 0)
        result.outputs_a, result.outputs_b = (deviation_text(sessions[n].run) for n in "AB")
        one_device = sessions["A"].backend.device == sessions["B"].backend.device
        for round_index in range(rounds):
            order = "AB" if round_index % 2 == 0 else "BA"
            result.order.append(order)
            for name in order:
                row = sessions[name].window(round_index)
                own_memory(row, held["B" if name == "A" else "A"], one_device)
                rows[name].append(row)
                if row["status"] != "ok":
                    result.reason = f"{name} failed in round {round_index + 1}: {row['status']}: {row['message']}"
                    return result
            a, b = result.rows_a[-1]["samples_per_s"], result.rows_b[-1]["samples_per_s"]
            flags = ", ".join(dict.fromkeys(f for r in (result.rows_a[-1], result.rows_b[-1])
                                            for f in disturbances(r.get("noise_flags")).split(", ") if f))
            result.disturbed.append(flags)
            result.load_cores.append([load_cores(r.get("noise_flags")) for r in (result.rows_a[-1], result.rows_b[-1])])
            result.samples_per_s_a.append(a)
            result.samples_per_s_b.append(b)
            say(f"compare: round {round_index + 1}/{rounds} ({order}): A {a:.4g}, B {b:.4g} samples/s, B/A {b / a:.3f}"
                + (f" [disturbed: {flags}]" if flags else ""))
        for name, session in sessions.items():  # after every round: how busy the GPU was (host-bound)
            busy.record(session.step, session.backend, rows[name])
    finally:
        for session in sessions.values():
            session.close()
        torch.set_num_threads(default_threads)
    judge(result)
    return result


def judge(result: Comparison) -> None:
    """In place: the verdict, and the means the variant table shows, from one computation: the
    judged rounds' geometric means, whose ratio is the verdict's B/A. Rounds disturbed by other processes alone
    are judged where B/A does not move with the load (results.under_load), and the verdict says so."""
    wrong = [f"{name} ({label}): {text.removeprefix('WRONG RESULTS: ')}" for name, label, rows, text in
             (("A", result.label_a, result.rows_a, result.outputs_a), ("B", result.label_b, result.rows_b, result.outputs_b))
             if rows and is_wrong(rows[0])]
    if wrong:  # no speed verdict: a variant that computes something else is not faster
        result.verdict, result.reason = WRONG_RESULTS, "; ".join(wrong)
        result.under_load = ""
        means(result)
        return
    loads = result.load_cores if len(result.load_cores) == len(result.disturbed) else None
    estimate, result.under_load = compare_rounds(result.samples_per_s_a, result.samples_per_s_b, result.disturbed,
                                                 loads, min_effect=result.tolerance)
    means(result)
    result.ratio, result.ci_low, result.ci_high = estimate.ratio, estimate.low, estimate.high
    # Host-bound rounds are judged (a re-measure gives the same), and the verdict says what it compared.
    hosts = comparison_note([(f"A ({result.label_a})", result.rows_a), (f"B ({result.label_b})", result.rows_b)])
    result.verdict, result.reason = estimate.verdict, "; ".join(r for r in (estimate.reason, hosts) if r)


def means(result: Comparison) -> None:
    """In place: the variant table's geometric means over the rounds the verdict rests on."""
    judged = result.judged
    result.mean_a = geometric_mean([result.samples_per_s_a[i] for i in judged]) if judged else None
    result.mean_b = geometric_mean([result.samples_per_s_b[i] for i in judged]) if judged else None


def own_memory(row: dict, other_held: int | None, one_device: bool) -> None:
    """In place: a variant's memory columns as its own. Both variants live in one process, and
    torch's peak allocated counts every live tensor on the device: on a shared device the other
    variant's resident bytes (weights, optimizer state, inputs, measured after it was built) are
    subtracted. RSS, reserved (one caching allocator) and NVML's used memory cannot be split:
    the row says they include both."""
    if row.get("status") != "ok":
        return
    both = ["peak_rss_bytes", "window_peak_rss_bytes"]
    peak = row.get("peak_mem_allocated_bytes")
    notes = [row["telemetry_note"]] if row.get("telemetry_note") else []
    if peak is not None and one_device:
        both += ["peak_mem_reserved_bytes", "gpu_mem_used_bytes"]
        if other_held:
            row["peak_mem_allocated_bytes"] = max(peak - other_held, 0)
            notes.append(f"peak_mem_allocated_bytes without the other compare variant's {other_held / 2**20:.0f} MiB "
                         f"on this device")
    notes.append(f"{', '.join(both)} include both compare variants (one process)")
    row["telemetry_note"] = "; ".join(notes)


def _allocated_now(cfg: BenchConfig) -> int | None:
    """Bytes torch holds on the variant's device before it is built (None: not known yet)."""
    try:
        return Backend.for_device(resolve_device(cfg.device)).allocated_bytes()
    except ConfigError:  # the session's open() reports it as its failure row
        return None


def parse_overrides(items: list[str] | None, where: str) -> dict:
    """['compile=default', 'channels-last=true'] -> {'compile': 'default', 'channels_last': 'true'}."""
    values = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ConfigError(where, f"expected KEY=VALUE (a BenchConfig field), got {item!r}")
        values[key] = value.strip()
    check_known_keys(values, BenchConfig.field_names(), where=where)
    for key in values:
        if key in _NOT_PER_VARIANT:
            raise ConfigError(key, f"cannot differ between variants of a compare ({where}); "
                                   f"allowed: any field except {', '.join(_NOT_PER_VARIANT)}")
    return values
