"""A sweep over the messages `bench` prints: bad inputs to every command, run through the real CLI.

Each case is `python -m bench_core <args>` in a process of its own, with a timeout; the table keeps
its exit code and the lines that are messages (every stderr line, and the stdout lines that say
something about the run rather than list its rows), so a reader can judge whether each one is true
on the machine it ran on. Real runs are tiny (resnet18 at 32 px, one step, one repeat).

    .venv/bin/python benchmarks/message_sweep.py --out benchmarks/message_sweep.md
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TINY = ["--model", "resnet18", "--width", "32", "--height", "32", "--steps", "1", "--repeats", "1",
        "--warmup-steps", "1", "--device", "cpu", "-q"]
LLM = ["--model", "llama-tiny", "--seq-len", "16", "--batch-size", "2", "--device", "cpu"]
EMULATE_BF16 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
# A stdout line is a message (not a row of a table) when it says one of these.
MESSAGE_WORDS = re.compile(r"error|warning|note|written|saved|within|bench |would|nothing|not |\bno\b|fits|rows ok|"
                           r"emulated|refus|unknown|allowed|did you mean|no rows|cache|report", re.I)
MAX_LINES = 8


def fixtures(root: Path) -> dict[str, Path]:
    """The files the cases read: broken YAML, a sweep with an unknown key, an empty result directory."""
    paths = {"bad_yaml": root / "bad.yaml", "unknown_key": root / "unknown-key.yaml",
             "bad_grid": root / "bad-grid.yaml", "empty_dir": root / "empty-results",
             "header_only": root / "header-only", "tiny_sweep": root / "tiny.yaml",
             "config_unknown": root / "config-unknown.yaml"}
    paths["bad_yaml"].write_text("name: broken\ngrid:\n  model: [resnet18\n  precision: fp32\n")
    paths["unknown_key"].write_text("name: unknown-key\nsettings:\n  widht: 32\ngrid:\n  model: [resnet18]\n")
    paths["bad_grid"].write_text("name: bad-grid\ngrid:\n  model: [resnet18]\n  batch_size: [0]\n")
    paths["tiny_sweep"].write_text("name: tiny\nsettings:\n  width: 32\n  height: 32\n  steps: 1\n  repeats: 1\n"
                                   "  device: cpu\ngrid:\n  model: [resnet18]\n  precision: [fp16]\n")
    paths["config_unknown"].write_text("model: resnet18\nprecison: fp32\n")
    paths["empty_dir"].mkdir()
    paths["header_only"].mkdir()
    (paths["header_only"] / "results.csv").write_text("model,precision,status\n")
    return paths


def cases(f: dict[str, Path], tmp: Path) -> list[tuple[str, list[str], dict[str, str]]]:
    """(case, bench arguments, extra environment) for every bad input the sweep tries."""
    run, no_env = ["run", *TINY], {}
    search = ["find-batch", *TINY[:6], "--device", "cpu", "--max-batch-size", "4", "-q"]
    pair = ["compare", *TINY[:-3], "--device", "cpu", "-q"]
    pair = [a for i, a in enumerate(pair) if a != "--repeats" and (i == 0 or pair[i - 1] != "--repeats")]
    out = [
        ("unknown command", ["rn"], no_env),
        ("run: unknown flag", ["run", "--modle", "resnet18"], no_env),
        ("run: unknown model", ["run", "--model", "resnet-18", "--device", "cpu"], no_env),
        ("run: fp16 on CPU", [*run, "--precision", "fp16"], no_env),
        ("run: bf16 on CPU", [*run, "--precision", "bf16"], no_env),
        ("run: amp-fp16 on CPU", [*run, "--precision", "amp-fp16"], no_env),
        ("run: amp-bf16 emulated", [*run, "--precision", "amp-bf16"], EMULATE_BF16),
        ("run: bf16 emulated", [*run, "--precision", "bf16"], EMULATE_BF16),
        ("run: tf32 on CPU", [*run, "--precision", "tf32"], no_env),
        ("run: fp8-tensorwise on CPU", [*run, "--precision", "fp8-tensorwise"], no_env),
        ("run: fp8-rowwise llama on CPU", ["run", *LLM, "--precision", "fp8-rowwise", "--steps", "1",
                                           "--repeats", "1"], no_env),
        ("run: unknown precision", [*run, "--precision", "fp4"], no_env),
        ("run: batch 0", [*run, "--batch-size", "0"], no_env),
        ("run: batch -1", [*run, "--batch-size", "-1"], no_env),
        ("run: batch abc", [*run, "--batch-size", "abc"], no_env),
        ("run: steps 0", [*run, "--steps", "0"], no_env),
        ("run: repeats 0", ["run", "--model", "resnet18", "--repeats", "0", "--device", "cpu"], no_env),
        ("run: width 0", ["run", "--model", "resnet18", "--width", "0", "--device", "cpu"], no_env),
        ("run: --device cuda", [*run[:-1], "--device", "cuda"], no_env),
        ("run: --device cuda:3", ["run", "--model", "resnet18", "--device", "cuda:3"], no_env),
        ("run: --device mps", ["run", "--model", "resnet18", "--device", "mps"], no_env),
        ("run: --device tpu", ["run", "--model", "resnet18", "--device", "tpu"], no_env),
        ("run: --nproc-per-node 64", [*run, "--nproc-per-node", "64"], no_env),
        ("run: --nproc-per-node 0", [*run, "--nproc-per-node", "0"], no_env),
        ("run: --num-threads 0", [*run, "--num-threads", "0"], no_env),
        ("run: --num-threads 8 on 2 cores", [*run, "--num-threads", "8"], no_env),
        ("run: --out parent missing", [*run, "--out", str(tmp / "no" / "such" / "dir")], no_env),
        ("run: --out is a file", [*run, "--out", str(f["bad_yaml"])], no_env),
        ("run: serve flag with train", [*run, "--concurrency", "4"], no_env),
        ("run: generate with resnet", [*run, "--mode", "generate"], no_env),
        ("run: new-tokens with train", [*run, "--new-tokens", "8"], no_env),
        ("run: tp-degree with ddp", [*run, "--tp-degree", "2"], no_env),
        ("run: batch-margin 1.5", [*run, "--batch-margin", "1.5"], no_env),
        ("run: compile max-autotune warmup 1", [*run, "--compile", "max-autotune"], no_env),
        ("run: fp16 adam", ["run", "--model", "resnet18", "--precision", "fp16", "--optimizer", "adam",
                            "--device", "cpu"], no_env),
        ("run: node-rank 2 of 1", [*run, "--node-rank", "2"], no_env),
        ("run: nnodes 2 no endpoint", [*run, "--nnodes", "2"], no_env),
        ("run: currency without price", [*run, "--currency", "EUR"], no_env),
        ("run: price -1", [*run, "--price-per-hour", "-1"], no_env),
        ("run: --config malformed YAML", ["run", "--config", str(f["bad_yaml"])], no_env),
        ("run: --config sweep file", ["run", "--config", str(f["unknown_key"])], no_env),
        ("run: --config unknown key", ["run", "--config", str(f["config_unknown"])], no_env),
        ("run: --config missing", ["run", "--config", str(tmp / "missing.yaml")], no_env),
        ("run: ok tiny, rows to a folder", [*run, "--out", str(tmp / "ok")], no_env),
        ("sweep: missing file", ["sweep", str(tmp / "missing.yaml")], no_env),
        ("sweep: malformed YAML", ["sweep", f["bad_yaml"].as_posix(), "--dry-run"], no_env),
        ("sweep: unknown key", ["sweep", f["unknown_key"].as_posix(), "--dry-run"], no_env),
        ("sweep: batch 0 in grid", ["sweep", f["bad_grid"].as_posix(), "--dry-run"], no_env),
        ("sweep: fp16 on CPU dry run", ["sweep", f["tiny_sweep"].as_posix(), "--dry-run",
                                        "--out", str(tmp / "sweep-out")], no_env),
        ("sweep: --runs 0", ["sweep", f["tiny_sweep"].as_posix(), "--dry-run", "--runs", "0"], no_env),
        ("sweep: --out parent missing", ["sweep", f["tiny_sweep"].as_posix(), "--dry-run",
                                         "--out", str(tmp / "no" / "such")], no_env),
        ("report: no dirs", ["report"], no_env),
        ("report: not a dir", ["report", str(tmp / "missing")], no_env),
        ("report: dir without rows", ["report", str(f["empty_dir"])], no_env),
        ("report: results.csv with no rows", ["report", str(f["header_only"]),
                                              "--out", str(tmp / "report.html")], no_env),
        ("report: --out not html", ["report", str(f["header_only"]), "--out", str(tmp / "r.txt")], no_env),
        ("memory: unknown model", ["memory", "--model", "resnet-18"], no_env),
        ("memory: batch 0", ["memory", "--model", "resnet18", "--batch-size", "0"], no_env),
        ("memory: fp16 on CPU", ["memory", "--model", "resnet18", "--precision", "fp16", "--device", "cpu"],
         no_env),
        ("memory: --device cuda", ["memory", "--model", "resnet18", "--device", "cuda"], no_env),
        ("memory: --device-memory-gib 0", ["memory", "--model", "resnet18", "--device-memory-gib", "0"], no_env),
        ("memory: --device-memory-gib 0.001", ["memory", "--model", "resnet18", "--device", "cpu",
                                               "--device-memory-gib", "0.001"], no_env),
        ("find-batch: fp16 on CPU", [*search, "--precision", "fp16"], no_env),
        ("find-batch: --steps given", [*search, "--steps", "1"], no_env),
        ("find-batch: --device cuda", ["find-batch", "--model", "resnet18", "--device", "cuda"], no_env),
        ("find-batch: max below start", ["find-batch", "--model", "resnet18", "--device", "cpu",
                                         "--batch-size", "64", "--max-batch-size", "8"], no_env),
        ("compare: no --a/--b", [*pair, "--rounds", "2"], no_env),
        ("compare: --repeats given", [*pair, "--repeats", "2", "--a", "batch_size=2", "--b", "batch_size=4"], no_env),
        ("compare: bad KEY=VALUE", ["compare", "--model", "resnet18", "--device", "cpu", "--a", "precision",
                                    "--b", "precision=fp32"], no_env),
        ("compare: unknown key", ["compare", "--model", "resnet18", "--device", "cpu", "--a", "precison=fp32",
                                  "--b", "precision=fp32"], no_env),
        ("compare: fp16 side on CPU", [*pair, "--a", "precision=fp32", "--b", "precision=fp16", "--rounds", "2"],
         no_env),
        ("compare: tf32 side on CPU", [*pair, "--a", "precision=fp32", "--b", "precision=tf32"], no_env),
        ("compare: --rounds 0", ["compare", "--model", "resnet18", "--device", "cpu", "--a", "batch_size=2",
                                 "--b", "batch_size=4", "--rounds", "0"], no_env),
        ("diff: the same folder twice", ["diff", str(tmp / "ok"), str(tmp / "ok")], no_env),
        ("diff: missing dirs", ["diff", str(tmp / "a"), str(tmp / "b")], no_env),
        ("diff: dirs without rows", ["diff", str(f["header_only"]), str(f["header_only"])], no_env),
        ("diff: --html not html", ["diff", str(f["header_only"]), str(f["header_only"]),
                                   "--html", str(tmp / "d.txt")], no_env),
        ("diff: --fail-above -1", ["diff", str(f["header_only"]), str(f["header_only"]),
                                   "--fail-above", "-1"], no_env),
        ("predict: no --from", ["predict", "--gpu", "H1000"], no_env),
        ("predict: unknown GPU", ["predict", "--from", str(tmp / "ok"), "--gpu", "H1000"], no_env),
        ("predict: --devices 0", ["predict", "--from", str(tmp / "ok"), "--gpu", "H100-SXM5-80GB", "--devices", "0"],
         no_env),
        ("predict: a CPU result dir", ["predict", "--from", str(tmp / "ok"), "--gpu", "H100-SXM5-80GB"], no_env),
        ("predict: --from missing", ["predict", "--from", str(tmp / "missing"), "--gpu", "H100"], no_env),
        ("ladder: mode train", ["ladder", "--mode", "train"], no_env),
        ("ladder: no server", ["ladder", "--mode", "serve", "--model", "resnet18"], no_env),
        ("ladder: --max-points 0", ["ladder", "--mode", "serve", "--model", "llama-tiny", "--max-points", "0"],
         no_env),
        ("run: serve, concurrency 0", ["run", "--mode", "serve", "--model", "llama-tiny", "--concurrency", "0"],
         no_env),
        ("sysinfo: --device cuda", ["sysinfo", "--device", "cuda"], no_env),
        ("sysinfo: --device tpu", ["sysinfo", "--device", "tpu"], no_env),
        ("models: --search no match", ["models", "--search", "zzzz"], no_env),
        ("peak: fp16 on CPU", ["peak", "--precision", "fp16", "--device", "cpu"], no_env),
        ("peak: tf32 on CPU", ["peak", "--precision", "tf32", "--device", "cpu"], no_env),
        ("peak: --threads 0", ["peak", "--threads", "0"], no_env),
        ("peak: --device cuda", ["peak", "--device", "cuda"], no_env),
        ("selftest --help", ["selftest", "--help"], no_env),
        ("slurm: dry run fp16 CPU", ["slurm", f["tiny_sweep"].as_posix(), "--dry-run",
                                     "--out", str(tmp / "slurm-out")], no_env),
        ("slurm: no sbatch in PATH", ["slurm", f["tiny_sweep"].as_posix(), "--out", str(tmp / "slurm-out2")],
         {"PATH": "/nonexistent"}),
        ("slurm: --nodes 0", ["slurm", f["tiny_sweep"].as_posix(), "--dry-run", "--nodes", "0"], no_env),
        ("slurm: --nproc-per-node 4 > gpus 1", ["slurm", "--model", "resnet18", "--dry-run",
                                                "--nproc-per-node", "4", "--gpus-per-node", "1"], no_env),
    ]
    return out


def message_lines(stdout: str, stderr: str) -> list[str]:
    said = [f"stderr: {line}" for line in stderr.splitlines() if line.strip()]
    said += [f"stdout: {line}" for line in stdout.splitlines() if line.strip() and MESSAGE_WORDS.search(line)]
    if len(said) > MAX_LINES:
        said = said[:MAX_LINES - 1] + [f"... {len(said) - MAX_LINES + 1} more line(s)"]
    return said


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def run_case(args: list[str], env_extra: dict[str, str], cwd: Path, timeout_s: float) -> tuple[str, list[str]]:
    env = {**os.environ, "NO_COLOR": "1", **env_extra}
    if "PATH" in env_extra:  # keep the interpreter reachable whatever PATH says
        env["PATH"] = env_extra["PATH"]
    try:
        done = subprocess.run([sys.executable, "-m", "bench_core", *args], capture_output=True, text=True,
                              env=env, cwd=cwd, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return f"timeout {timeout_s:g} s", message_lines(out, err)
    return str(done.returncode), message_lines(done.stdout, done.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/message_sweep.md", help="the markdown table (default: %(default)s)")
    parser.add_argument("--timeout-s", type=float, default=120, help="per case (default: %(default)s)")
    parser.add_argument("--only", default="", help="run only the cases whose name contains this text")
    args = parser.parse_args()
    repo = Path(__file__).resolve().parents[1]
    tmp = Path(tempfile.mkdtemp(prefix="message-sweep-"))
    rows = []
    try:
        f = fixtures(tmp)
        for name, bench_args, env in cases(f, tmp):
            if args.only and args.only not in name:
                continue
            started = time.monotonic()
            code, said = run_case(bench_args, env, repo, args.timeout_s)
            print(f"{name}: exit {code} ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
            shown = " ".join(a.replace(str(tmp), "$TMP") for a in bench_args)
            prefix = " ".join(f"{k}={v}" for k, v in env.items()) + " " if env else ""
            rows.append(f"| {cell(name)} | `{cell(prefix + 'bench ' + shown)}` | {code} | "
                        f"{'<br>'.join(cell(line.replace(str(tmp), '$TMP')) for line in said) or '(nothing)'} |")
            write_table(Path(args.out), rows)  # after every case: a sweep cut short still shows what it saw
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(args.out)
    return 0


def write_table(path: Path, rows: list[str]) -> None:
    table = ["# Messages of `bench`, one bad input at a time", "",
             "Written by `benchmarks/message_sweep.py` on a CPU-only machine (no GPU). `$TMP` is the sweep's "
             "scratch folder.", "", "| case | command | exit | messages |", "|---|---|---|---|", *rows, ""]
    path.write_text("\n".join(table))


if __name__ == "__main__":
    sys.exit(main())
