"""The results store: atomic files, appends that never interleave, schema in every row."""
import csv
import json
import multiprocessing
import subprocess
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench_core import BenchConfig, ConfigError
from bench_core.results import columns, make_row, read_run, rebuild_csv, write_run


def _rows(name: str, n: int) -> list[dict]:
    return [make_row(run_id=name, repeat=i, status="ok", timestamp=f"2026-01-01T00:00:{i:02d}",
                     model="resnet18", samples_per_s=100.0 + i) for i in range(n)]


def _writer(out_dir: str, worker: int) -> None:
    for run in range(5):
        write_run(out_dir, f"w{worker}-r{run}", _rows(f"w{worker}-r{run}", 3))


def test_concurrent_writers_never_interleave_or_lose_rows(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with open(tmp_path / "results.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 4 * 5 * 3
    assert {r["run_id"] for r in rows} == {f"w{w}-r{r}" for w in range(4) for r in range(5)}
    assert list(rows[0]) == columns()


def test_a_truncated_rows_file_is_recognised_not_read(tmp_path):
    write_run(tmp_path, "good", _rows("good", 2))
    broken = tmp_path / "runs" / "broken"
    broken.mkdir(parents=True)
    (broken / "rows.json").write_text(json.dumps(_rows("broken", 2))[:50])  # as if killed mid-write
    assert read_run(broken) is None
    rebuild_csv(tmp_path)
    with open(tmp_path / "results.csv") as handle:
        assert {r["run_id"] for r in csv.DictReader(handle)} == {"good"}


def test_a_killed_writer_leaves_the_old_file_whole(tmp_path):
    # SIGKILL while results.csv is being replaced: the target is either old or new, never partial.
    write_run(tmp_path, "first", _rows("first", 2))
    before = (tmp_path / "results.csv").read_text()
    script = textwrap.dedent(f"""
        import os, signal
        from bench_core import results
        real_replace = os.replace
        def die(src, dst):
            os.kill(os.getpid(), signal.SIGKILL)  # killed after the temp file, before the rename
        os.replace = die
        results.write_run({str(tmp_path)!r}, "second", [results.make_row(run_id="second", repeat=0, status="ok")])
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert proc.returncode == -9
    assert (tmp_path / "results.csv").read_text() == before
    assert read_run(tmp_path / "runs" / "second") is None


def test_unknown_columns_are_refused():
    with pytest.raises(KeyError, match="not in the result schema"):
        make_row(samples_per_second=1.0)


def test_nan_is_written_as_empty_not_as_invalid_json(tmp_path):
    write_run(tmp_path, "nan", [make_row(run_id="nan", repeat=0, status="nan", loss_final=float("nan"))])
    rows = json.loads((tmp_path / "runs" / "nan" / "rows.json").read_text())
    assert rows[0]["loss_final"] is None


# -- any config dict yields a valid config or a one-line error naming the field ---------

_values = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                    st.text(max_size=12), st.lists(st.integers(), max_size=3),
                    st.sampled_from(["resnet18", "cpu", "fp32", "amp-bf16", "train", "infer", "16", "cuda:0",
                                     "timm:resnet10t", "unet3d", "vit_b_16", "64", "true", "x\ny", "1e9"]))
_keys = st.one_of(st.sampled_from(BenchConfig.field_names()), st.text(min_size=1, max_size=10))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_keys, _values, max_size=6))
def test_any_config_dict_is_valid_or_one_line_error(values):
    try:
        cfg = BenchConfig.from_dict(values)
    except ConfigError as err:
        lines = str(err).splitlines()  # one line, or one per mistake where there are several (config.mistakes)
        mistakes = getattr(err, "errors", [err])
        assert lines == [str(err)] if len(mistakes) == 1 else lines[1:] == [f"  {e}" for e in mistakes]
        named = {*BenchConfig.field_names(), "config", *map(str, values), *(repr(str(k)) for k in values)}
        for one in mistakes:
            assert "\n" not in str(one) and str(one).startswith(f"{one.field}: ") and one.field in named
    else:
        assert cfg.batch_size >= 1 and cfg.width >= 1 and cfg.height >= 1
        assert BenchConfig.from_dict(cfg.to_dict()) == cfg  # a valid config round-trips
