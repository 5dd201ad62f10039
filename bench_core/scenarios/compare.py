"""`bench compare`: two variants of one workload, interleaved (A B A B ...), and a verdict with its confidence interval.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass, field

from bench_core.config.schema import MAX_BATCH, BenchConfig, check_int, check_known_keys
from bench_core.errors import ConfigError
from bench_core.run.runner import Progress, Session

# Two-sided 97.5% quantiles of Student's t by degrees of freedom (no scipy here); above 30
# the next lower tabulated df is used, which errs on the wide side.
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
         10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
         18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060,
         26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}



CONFIDENCE = 0.95


# Keys that make no sense per variant in one interleaved process.
_NOT_PER_VARIANT = ("repeats", "nproc_per_node", "nnodes", "node_rank", "rdzv_endpoint", "profile")


def t_quantile_975(df: int) -> float:
    usable = [d for d in _T975 if d <= df]
    return _T975[max(usable)] if usable else math.inf


@dataclass
class RatioEstimate:
    """Geometric mean of per-round B/A throughput ratios with a t-interval on their logs."""
    ratio: float
    ci_low: float
    ci_high: float
    rounds: int

    @classmethod
    def from_pairs(cls, a: list[float], b: list[float]) -> "RatioEstimate":
        logs = [math.log(y / x) for x, y in zip(a, b)]
        mean = statistics.fmean(logs)
        half = t_quantile_975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else math.inf
        return cls(math.exp(mean), math.exp(mean - half), math.exp(mean + half), len(logs))

    def verdict(self, tolerance: float) -> tuple[str, str]:
        """faster / slower only when the CI excludes 1 AND the ratio is beyond the tolerance."""
        ci = f"{CONFIDENCE:.0%} CI {self.ci_low:.3f} to {self.ci_high:.3f}"
        if self.ci_low > 1.0 and self.ratio >= 1.0 + tolerance:
            return "faster", f"B is {self.ratio - 1:.1%} faster ({ci})"
        if self.ci_high < 1.0 and self.ratio <= 1.0 - tolerance:
            return "slower", f"B is {1 - self.ratio:.1%} slower ({ci})"
        if self.ci_low <= 1.0 <= self.ci_high:
            why = f"the {ci} includes 1"
        else:
            why = f"the difference {abs(self.ratio - 1):.1%} is within the tolerance {tolerance:.0%} ({ci})"
        return "same within noise", why


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
    noisy_rounds: list[int] = field(default_factory=list)  # rounds where a row has noise_flags
    ratio: float | None = None          # B / A throughput (geometric mean over rounds)
    ci_low: float | None = None
    ci_high: float | None = None
    verdict: str | None = None          # faster | slower | same within noise | None (a variant failed)
    reason: str = ""
    rows_a: list[dict] = field(default_factory=list, repr=False)
    rows_b: list[dict] = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        return self.verdict is not None

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
        lines = [head, f"{'variant':32s} {'samples/s':>10s} {'step ms':>9s} {'first step ms':>14s} {'compile s':>10s}"]
        for name, label, rows in (("A", self.label_a, self.rows_a), ("B", self.label_b, self.rows_b)):
            ok = [r for r in rows if r["status"] == "ok"]
            if not ok:
                lines.append(f"{name} {label:30s} {rows[0]['status'] if rows else 'not run'}: "
                             f"{rows[0]['message'] if rows else ''}")
                continue
            first = ok[0]
            lines.append(f"{name} {label:30s} {statistics.median(r['samples_per_s'] for r in ok):10.4g} "
                         f"{statistics.median(r['step_time_ms_median'] for r in ok):9.4g} "
                         f"{first['first_step_ms'] or 0:14.1f} "
                         f"{'' if first['compile_s'] is None else format(first['compile_s'], '.1f'):>10s}")
        if self.samples_per_s_a:
            lines.append(f"{'round':>5s} {'order':>5s} {'A samples/s':>12s} {'B samples/s':>12s} {'B/A':>7s}")
            for i, (order, a, b) in enumerate(zip(self.order, self.samples_per_s_a, self.samples_per_s_b)):
                flag = "  noise flags" if i in self.noisy_rounds else ""
                lines.append(f"{i:5d} {order:>5s} {a:12.4g} {b:12.4g} {b / a:7.3f}{flag}")
        if self.noisy_rounds:
            lines.append(f"{len(self.noisy_rounds)} of {len(self.order)} rounds carry noise flags (other processes "
                         "on the device, high step-time CV): see the rows' noise_flags")
        if self.verdict:
            lines.append(f"B/A throughput = {self.ratio:.3f} ({CONFIDENCE:.0%} CI {self.ci_low:.3f} to "
                         f"{self.ci_high:.3f}, {self.rounds} rounds): {self.verdict.upper()} - {self.reason}")
        else:
            lines.append(f"no verdict: {self.reason}")
        return "\n".join(lines)


def compare(cfg_a: BenchConfig, cfg_b: BenchConfig, rounds: int = 8, tolerance: float = 0.02,
            labels: tuple[str, str] = ("as configured", "as configured"),
            progress: Progress | None = None) -> Comparison:
    """Build A and B once each, then alternate their timed windows: AB, BA, AB, ...

    Each round is one window (cfg.steps / cfg.min_seconds) per variant; the order flips every
    round so drift and "who runs second" cancel. Ratio = B/A samples/s, paired per round.
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
    say = progress or (lambda msg: None)
    result = Comparison(labels[0], labels[1], cfg_a.to_dict(), cfg_b.to_dict(), rounds, tolerance)
    if cfg_a.compile != "off" or cfg_b.compile != "off":
        import torch._dynamo
        torch._dynamo.reset()  # compile from scratch, as a fresh process would
    default_threads = torch.get_num_threads()
    sessions = {"A": Session(cfg_a, say, default_threads), "B": Session(cfg_b, say, default_threads)}
    rows = {"A": result.rows_a, "B": result.rows_b}
    try:
        for name, session in sessions.items():
            say(f"compare: building and warming up {name} ({labels['AB'.index(name)]})")
            if not session.open():
                rows[name].append(session.failure)
                result.reason = f"{name} failed to start: {session.failure['status']}: {session.failure['message']}"
                return result
        for round_index in range(rounds):
            order = "AB" if round_index % 2 == 0 else "BA"
            result.order.append(order)
            for name in order:
                row = sessions[name].window(round_index)
                rows[name].append(row)
                if row["status"] != "ok":
                    result.reason = f"{name} failed in round {round_index}: {row['status']}: {row['message']}"
                    return result
            a, b = result.rows_a[-1]["samples_per_s"], result.rows_b[-1]["samples_per_s"]
            if result.rows_a[-1].get("noise_flags") or result.rows_b[-1].get("noise_flags"):
                result.noisy_rounds.append(round_index)
            result.samples_per_s_a.append(a)
            result.samples_per_s_b.append(b)
            say(f"compare: round {round_index + 1}/{rounds} ({order}): A {a:.4g}, B {b:.4g} samples/s, B/A {b / a:.3f}")
    finally:
        for session in sessions.values():
            session.close()
        torch.set_num_threads(default_threads)
    estimate = RatioEstimate.from_pairs(result.samples_per_s_a, result.samples_per_s_b)
    result.ratio, result.ci_low, result.ci_high = estimate.ratio, estimate.ci_low, estimate.ci_high
    result.verdict, result.reason = estimate.verdict(tolerance)
    return result


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
