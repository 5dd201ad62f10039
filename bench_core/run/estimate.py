"""How long a configuration's warm-up will take, said before it starts when that is far beyond
what a benchmark run needs (a sequence length that makes one step take an hour).

Two estimates, each as early as it can be made: before the first step, from the task's FLOP
formula at the device's peak (a lower bound: no step runs faster than the peak); after the first
step, from its measured time (every task, with or without a formula). Either warns, once, when
the warm-up alone would take LONG_WARMUP_S or more. It warns rather than refuses: a long run can be
what was meant (a real model at its real length), and Ctrl-C or SIGTERM stops it at any point
(errors.sigterm_as_interrupt), its interrupted row recorded.
"""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only: the CLI imports LongStepWarning before, and without, torch
    from bench_core.measure.peaks import Peak
    from bench_core.workload.family import Task

# A warm-up this long is far beyond a benchmark's budget: the timed windows of a run take seconds
# to a few minutes (min_seconds per repeat), and a warm-up exists only to reach steady state.
LONG_WARMUP_S = 600.0


class LongStepWarning(UserWarning):
    """A configuration's warm-up is estimated far beyond a run's budget: said before it starts."""


# A warm-up whose steps left after the first will take this long or more is followed step by step:
# the first step's time, what is left, and each further step (an emulated precision sat in warm-up
# for over 10 minutes with no line).
PROGRESS_AFTER_S = 20.0


def say_warmup(say, cfg, first_s: float, run: dict) -> None:
    """After the first step: when the rest of the warm-up will take PROGRESS_AFTER_S or more, say how
    long, and why where the precision is only emulated here."""
    left = warmup_steps_left(cfg.warmup_steps, first_done=True)
    if first_s * left < PROGRESS_AFTER_S:
        return
    why = (f" ({cfg.precision} is emulated on this {run.get('device_type') or 'device'}: slower than fp32)"
           if run.get("precision_support") == "emulated" else "")
    say(f"{cfg.model} {cfg.mode} {cfg.precision} bs={cfg.batch_size}: warm-up: first step {duration_text(first_s)}; "
        f"about {duration_text(first_s * left)} for the {left} steps left{why}")


def say_warmup_step(say, cfg, done: int, first_s: float) -> None:
    """Each further warm-up step of a long warm-up (see say_warmup), with what is left."""
    total = warmup_steps_left(cfg.warmup_steps, first_done=True)
    left = total - 2 - done  # the FLOP-counting step and `done + 1` warm-up steps are behind
    if first_s * total >= PROGRESS_AFTER_S:
        say(f"{cfg.model} {cfg.mode} {cfg.precision} bs={cfg.batch_size}: warm-up step {done + 1} done; "
            f"{left} left, about {duration_text(first_s * left)}")


def duration_text(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 48 * 3600 else f"{seconds / 86400:.0f} days"


def warmup_steps_left(warmup_steps: int, first_done: bool) -> int:
    """Steps before the first timed window: the first step, the FLOP-counting step and the other
    warmup_steps - 1 (runner.Session._build), less the first one when it has run."""
    return max(warmup_steps, 1) + 1 - (1 if first_done else 0)


def warn_if_long(what: str, step_s: float | None, steps: int, basis: str, lower_bound: bool) -> str | None:
    """Warn (LongStepWarning) when `steps` steps of `step_s` seconds take LONG_WARMUP_S or more;
    returns the warning's text, or None when there is nothing to say."""
    if step_s is None or step_s * steps < LONG_WARMUP_S:
        return None
    at_least = "at least " if lower_bound else "about "
    text = (f"{what}: the warm-up alone ({steps} steps) will take {at_least}{duration_text(step_s * steps)}: "
            f"one step {at_least}{duration_text(step_s)} ({basis}); a smaller batch size or input size is "
            f"quicker; Ctrl-C or SIGTERM stops it at any point")
    warnings.warn(text, LongStepWarning, stacklevel=2)
    return text


def formula_step_s(flops_per_step: float | None, peak_tflops: float | None) -> float | None:
    """Seconds of one step at the device's peak: a lower bound on the real step time."""
    if not flops_per_step or not peak_tflops:
        return None
    return flops_per_step / (peak_tflops * 1e12)


# Slower than any device a benchmark runs on (a 2-core AVX2 CPU reaches ~0.05 TFLOP/s in fp32): a warm-up
# that stays under LONG_WARMUP_S even at this rate cannot be long anywhere.
SLOWEST_TFLOPS = 0.01


def may_be_long(cfg, formula: tuple[float, str] | None) -> bool:
    """Whether the formula's warm-up could reach LONG_WARMUP_S on the slowest device. Only then is a CPU's
    peak measured before the first step: its large matrices would otherwise raise every row's peak RSS
    (a process's high-water mark) for a warning that cannot fire."""
    if not formula:
        return False
    step_s = formula_step_s(formula[0] * cfg.batch_size, SLOWEST_TFLOPS)
    return step_s * warmup_steps_left(cfg.warmup_steps, first_done=False) >= LONG_WARMUP_S


def check_formula(cfg, task: Task, formula: tuple[float, str] | None, peak: Peak) -> str | None:
    """Before the first step: the task's FLOP formula at the device's peak (on a CPU the measured,
    cached peak, which the row's MFU needs anyway). The warning's text, or None."""
    if not formula:
        return None
    step_flops = formula[0] * cfg.batch_size
    return warn_if_long(_what(cfg, task), formula_step_s(step_flops, peak.tflops),
                        warmup_steps_left(cfg.warmup_steps, first_done=False),
                        f"{step_flops:.3g} FLOPs at the device's peak, {peak.tflops or 0:.3g} TFLOP/s",
                        lower_bound=True)


def check_first_step(cfg, task: Task, first_s: float) -> str | None:
    """After the first step, for every task: the rest of the warm-up at the first step's time
    (not with compile on: its first step is mostly compiling)."""
    if cfg.compile != "off":
        return None
    return warn_if_long(_what(cfg, task), first_s, warmup_steps_left(cfg.warmup_steps, first_done=True),
                        "each as long as the first", lower_bound=False)


def _what(cfg, task: Task) -> str:
    return f"{cfg.model} {cfg.mode} {cfg.precision} bs={cfg.batch_size} {task.input_text(cfg)}".rstrip()
