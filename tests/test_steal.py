"""CPU steal time as a disturbance: the hypervisor running someone else on this VM's cores is no process here, so
the other-processes flag cannot see it. Its seconds come from /proc/stat's steal column, over the window, on the
cores this process may use; above a stated threshold the row is flagged cpu-steal, which every comparison treats
as it treats other processes on the CPU."""
import time

import pytest
import torch

from bench_core.devices import Backend
from bench_core.measure import noise, telemetry
from bench_core.measure.steal import TICK_S, our_cpus, steal_cores, steal_flag, steal_s
from bench_core.results.disturbed import disturbances, disturbed_note
from bench_core.results.under_load import load_cores

# Two readings of a 4-core VM, as /proc/stat gives them (USER_HZ ticks): core 2 lost 30 ticks between them,
# core 3 lost 12, cores 0 and 1 nothing.
BEFORE = """cpu  4705 356 584 3699176 23 23 0 100 0 0
cpu0 1393 280 184 924606 6 12 0 10 0 0
cpu1 1104 26 128 925222 5 3 0 20 0 0
cpu2 1106 25 136 924701 6 4 0 30 0 0
cpu3 1102 25 136 924647 6 4 0 40 0 0
intr 114930548 113199788 3 0 5 263 0 4 [... 235 more numbers ...]
ctxt 1990473
"""
AFTER = """cpu  4905 356 684 3699276 23 23 0 142 0 0
cpu0 1443 280 209 924631 6 12 0 10 0 0
cpu1 1154 26 153 925247 5 3 0 20 0 0
cpu2 1156 25 161 924726 6 4 0 60 0 0
cpu3 1152 25 161 924672 6 4 0 52 0 0
intr 114930548 113199788 3 0 5 263 0 4 [... 235 more numbers ...]
ctxt 1990999
"""


def test_steal_over_a_window_from_two_readings_of_proc_stat():
    # the whole machine: 42 ticks in 2 s, 0.21 cores
    assert steal_cores(steal_s(BEFORE), steal_s(AFTER), wall_s=2.0) == pytest.approx(42 * TICK_S / 2.0)
    # the cores a run may use (its affinity): cores 2 and 3 lost 42 ticks, cores 0 and 1 none
    assert steal_cores(steal_s(BEFORE, {2, 3}), steal_s(AFTER, {2, 3}), 2.0) == pytest.approx(42 * TICK_S / 2.0)
    assert steal_cores(steal_s(BEFORE, {0, 1}), steal_s(AFTER, {0, 1}), 2.0) == 0.0
    assert steal_s(BEFORE, {2}) == pytest.approx(30 * TICK_S)


def test_no_steal_field_or_no_file_is_no_reading_and_no_flag(tmp_path):
    old_kernel = "cpu  4705 356 584 3699176 23 23 0\ncpu0 1393 280 184 924606 6 12 0\n"  # before 2.6.11: 7 counts
    assert steal_s(old_kernel) is None and steal_s(old_kernel, {0}) is None
    assert steal_s(BEFORE, {7}) is None  # no line for the core asked for
    assert steal_cores(None, steal_s(AFTER), 2.0) is None and steal_flag(None, 2.0) is None
    cols = sample(tmp_path / "absent")
    assert cols["cpu_steal_cores"] is None and "cpu-steal" not in (cols.get("noise_flags") or "")


def test_the_flag_is_raised_above_its_threshold_and_not_at_it():
    over = noise.STEAL_CPU_CORES + 2 * TICK_S  # a 1 s window: one tick is 0.01 cores of resolution
    assert steal_flag(over, wall_s=1.0) == f"cpu-steal({over:.2f} cores)"
    assert steal_flag(noise.STEAL_CPU_CORES, wall_s=1.0) is None
    assert steal_flag(0.0, wall_s=1.0) is None
    # One tick in a 0.1 s window reads 0.1 cores: the counter's rounding, not a measurement of 0.1 cores
    assert steal_flag(TICK_S / 0.1, wall_s=0.1) is None
    assert steal_flag(3 * TICK_S / 0.1, wall_s=0.1) == "cpu-steal(0.30 cores)"


def test_a_window_the_hypervisor_took_cores_from_is_flagged_and_every_comparison_calls_it_disturbed(tmp_path):
    cores = sorted(our_cpus() or {0})
    stat = tmp_path / "stat"
    stat.write_text(proc_stat(cores, steal_ticks=0))
    started = time.perf_counter()
    with telemetry.Sampler(Backend.for_device(torch.device("cpu")), interval_s=0.05, proc_stat=stat) as sampler:
        time.sleep(0.1)
        stat.write_text(proc_stat(cores, steal_ticks=100))  # 1 s taken from each of the process's cores
        time.sleep(0.1)
    wall = time.perf_counter() - started  # the sampler's window lies inside: at least 0.2 s, at most this
    cols = sampler.columns()
    stolen = len(cores) * 100 * TICK_S
    assert stolen / wall <= cols["cpu_steal_cores"] <= stolen / 0.2
    assert f"cpu-steal({cols['cpu_steal_cores']:.2f} cores)" in cols["noise_flags"].split(";")
    assert "cpu-steal" in disturbances(cols["noise_flags"]).split(", ")
    row = {"status": "ok", "noise_flags": cols["noise_flags"]}
    assert disturbed_note([row]).startswith("1 disturbed (") and "cpu-steal" in disturbed_note([row])
    assert "cpu-steal" in {rule["flag"] for rule in noise.noise_rules()}


def proc_stat(cores, steal_ticks: int) -> str:
    lines = [f"cpu  100 0 100 1000 0 0 0 {steal_ticks * len(cores)} 0 0"]
    lines += [f"cpu{c} 50 0 50 500 0 0 0 {steal_ticks} 0 0" for c in cores]
    return "\n".join(lines) + "\nctxt 1\n"


def sample(proc_stat_path, seconds=0.05):
    with telemetry.Sampler(Backend.for_device(torch.device("cpu")), proc_stat=proc_stat_path) as sampler:
        time.sleep(seconds)
    return sampler.columns()


def test_bench_compare_counts_steady_steal_as_a_load_its_alternating_rounds_share():
    from test_compare_under_load import rounds  # a real compare's six rounds, judged
    steady = [f"cpu-steal({c:.2f} cores)" for c in (0.31, 0.33, 0.32, 0.30, 0.31, 0.33)]
    result = rounds([42.0, 41.5, 43.8, 42.2, 43.0, 41.9], steady, list(reversed(steady)))
    assert result.verdict == "slower" and result.under_load.startswith("measured under load: 6 of 6 rounds")
    assert "(0.31-0.32 cores busy)" in result.under_load  # each round: the mean of its A and B windows
    assert load_cores("other-processes-on-cpu(0.50 cores);cpu-steal(0.25 cores)") == 0.75


def test_steal_is_not_counted_as_other_processes():
    """psutil's busy sum holds steal; the other-processes flag must not see the hypervisor's steal as a process."""
    import collections
    times = collections.namedtuple("scputimes", "user nice system idle iowait irq softirq steal guest guest_nice")
    quiet = times(100.0, 0.0, 20.0, 500.0, 5.0, 0.0, 1.0, 0.0, 0.0, 0.0)
    stolen = quiet._replace(steal=30.0)
    assert telemetry.host_busy_s(quiet) == telemetry.host_busy_s(stolen) == pytest.approx(121.0)


def test_the_sweeps_busy_warning_names_steal(tmp_path):
    cores = sorted(our_cpus() or {0})
    stat = tmp_path / "stat"
    stat.write_text(proc_stat(cores, steal_ticks=0))
    busy = telemetry.BusyNow(proc_stat=stat)
    stat.write_text(proc_stat(cores, steal_ticks=100))  # 1 s a core within the stretch of at least 0.3 s
    text = busy.text(min_s=0.3)
    assert text.startswith("this machine is busy: ") and "of its cores to someone else (CPU steal)" in text
    assert telemetry.busy_text(0.0, steal=None) == ""
    assert telemetry.busy_text(0.0, steal=0.3) == (
        "this machine is busy: the hypervisor is giving 0.30 of its cores to someone else (CPU steal); the estimate "
        "is for an idle machine, so the sweep will take longer, and repeats measured beside them are marked "
        "disturbed (re-measure on a quiet machine)")
