"""Out of memory is a result: an `oom` row, and the next configuration runs unaffected.

The CPU allocation failure is real: a child process lowers its address-space limit."""
import json
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import json, resource
    import psutil
    import torchvision  # every library is mapped before the limit is lowered
    from bench_core import BenchConfig, run_benchmark
    import bench_core.run.runner
    base = psutil.Process().memory_info().vms
    limit = base + 1_500_000_000
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    tiny = dict(model="resnet18", steps=1, warmup_steps=0, repeats=1, min_seconds=0, device="cpu")
    big = run_benchmark(BenchConfig(**tiny, batch_size=512, width=224, height=224))
    small = run_benchmark(BenchConfig(**tiny, batch_size=2, width=32, height=32))
    print(json.dumps([(r["status"], r["message"]) for r in big + small]))
""")


def test_cpu_allocation_failure_is_an_oom_row_and_the_next_run_is_fine():
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (big_status, big_message), (small_status, _) = json.loads(proc.stdout.strip().splitlines()[-1])
    assert big_status == "oom", big_message
    assert "allocate" in big_message or "memory" in big_message.lower()
    assert small_status == "ok"
