"""Text workloads: transformers models built offline from configurations, trained, run forward and
generating, in tokens/s with the transformer MFU; and every bad input refused in one line."""
import json
import socket

import pytest

from bench_core import BenchConfig, ConfigError, run_benchmark
from bench_core.cli import main as bench
from bench_core.run.timing import Window, generation_columns
from bench_core.workload.models import REGISTRY, model_table, resolve_model

TINY_TEXT = dict(batch_size=2, steps=3, warmup_steps=1, repeats=1, min_seconds=0, device="cpu")
GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 1000, "n_positions": 128}
BERT = {"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 64}
# Llama-shaped (grouped-query attention, RMSNorm, SwiGLU) at a 1,000-token vocabulary: llama-tiny's 32,000-token
# head made its reduced-precision steps 10 s of CPU each where bf16 and fp16 are emulated (AVX2 only)
LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 128}
T5 = {"model_type": "t5", "d_model": 64, "d_ff": 128, "d_kv": 16, "num_layers": 2, "num_decoder_layers": 2,
      "num_heads": 4, "vocab_size": 1000}
# The formula (6N + 12·L·H·Q·T, PaLM B) and FlopCounterMode differ by what one counts and the other
# does not (elementwise ops, the masked-LM head's layer norm): within this on the tiny models.
FORMULA_MARGIN = 0.03


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("configs")
    paths = {}
    for name, values in (("gpt2", GPT2), ("bert", BERT), ("t5", T5), ("llama", LLAMA)):
        paths[name] = folder / f"{name}.json"
        paths[name].write_text(json.dumps(values))
    return paths


def run_one(model, **changes) -> dict:
    rows = run_benchmark(BenchConfig(**{**TINY_TEXT, "model": model, **changes}))
    assert rows[0]["status"] == "ok", rows[0]["message"]
    return rows[0]


def test_bench_models_lists_the_text_models_with_task_sequence_length_and_parameters(capsys):
    assert bench(["models", "--json"]) == 0
    listed = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    # The shapes of the published models, counted on the meta device: their published sizes.
    published = {"bert-base": 110e6, "bert-large": 335e6, "gpt2": 124e6, "llama-1b": 1.24e9, "llama-3b": 3.21e9,
                 "llama-8b": 8.03e9, "t5-base": 223e6}
    for name, size in published.items():
        row = listed[name]
        assert row["params"] == pytest.approx(size, rel=0.01), name
        assert row["task"] in ("masked-lm", "causal-lm", "seq2seq-lm") and row["default_input"].startswith("seq ")
    assert listed["gpt2"]["default_input"] == "seq 1024" and listed["bert-base"]["task"] == "masked-lm"
    assert {"hf:<model_type>", "hf:<config.json>"} <= set(listed)


def test_llama_shapes_use_grouped_query_attention():
    for name in ("llama-1b", "llama-3b", "llama-8b", "llama-tiny"):
        config = REGISTRY[name].builder.config
        assert config["num_key_value_heads"] < config["num_attention_heads"], name


def test_tiny_gpt2_trains_in_tokens_per_second_with_the_transformer_mfu(configs):
    row = run_one(f"hf:{configs['gpt2']}", seq_len=32)
    steps, seconds = row["timed_steps"], row["timed_s"]
    assert row["throughput_unit"] == "tokens/s" and row["sample_unit"] == "sequences/s"
    assert row["tokens_per_s"] == pytest.approx(2 * 32 * steps / seconds, rel=1e-9)
    assert row["throughput"] == row["tokens_per_s"] == pytest.approx(row["samples_per_s"] * 32, rel=1e-9)
    assert row["input_shape"] == "32 tokens" and row["task"] == "causal-lm" and row["mpx_per_s"] is None
    assert row["flops_method"].startswith("formula: 6N + 12·L·H·Q·T")
    assert row["flops_per_sample"] == pytest.approx(row["flops_per_sample_counted"], rel=FORMULA_MARGIN)
    assert 0 < row["mfu"] <= 1
    assert row["attn_implementation"] == "sdpa" and row["attention_kernel"]
    assert row["params_count"] == parameter_count_of(configs["gpt2"])


def test_a_gpt2_says_its_loss_so_transformers_warns_of_no_guess(configs):
    """transformers takes the loss from the model's class name; GPT2LMHeadModel names none, so it
    warned '`loss_type=None` ... unrecognized' on every GPT-2 training run until the model said it."""
    cfg = BenchConfig(**{**TINY_TEXT, "model": f"hf:{configs['gpt2']}"})
    model = resolve_model(cfg.model).build(cfg)
    assert model.loss_type == "ForCausalLM" and model.loss_function.__name__ == "ForCausalLMLoss"


def parameter_count_of(path) -> int:
    from bench_core.workload.models import count_parameters
    cfg = BenchConfig(**{**TINY_TEXT, "model": f"hf:{path}"})
    return count_parameters(resolve_model(cfg.model).build(cfg))


@pytest.mark.parametrize("name, mode, task", [("bert", "train", "masked-lm"), ("bert", "infer", "masked-lm"),
                                              ("t5", "train", "seq2seq-lm"), ("t5", "infer", "seq2seq-lm")])
def test_encoders_and_encoder_decoders_run_with_the_formula_beside_the_count(configs, name, mode, task):
    row = run_one(f"hf:{configs[name]}", mode=mode, seq_len=16)
    assert row["task"] == task and row["loss_finite"]
    assert row["flops_per_sample"] == pytest.approx(row["flops_per_sample_counted"], rel=FORMULA_MARGIN)
    assert row["flops_method"].startswith("formula: " + ("6N" if mode == "train" else "2N"))


def test_generate_times_prefill_and_decode_apart_and_they_add_up():
    prompt, new, batch = 16, 6, 2
    row = run_one("llama-tiny", mode="generate", prompt_len=prompt, new_tokens=new, batch_size=batch)
    calls, seconds = row["timed_steps"], row["timed_s"]
    assert row["output_tokens"] == new and row["input_shape"] == f"prompt {prompt} + {new} new tokens"
    assert row["decode_tokens_per_s"] == pytest.approx(batch * (new - 1) * calls / row["decode_s"], rel=1e-9)
    ttft_total = batch * prompt * calls / row["prefill_tokens_per_s"]
    assert ttft_total + row["decode_s"] == pytest.approx(seconds, rel=1e-9)  # prefill + decode = the calls
    assert row["tokens_per_s"] == pytest.approx(batch * new * calls / seconds, rel=1e-9)
    assert 0 < row["ttft_ms_median"] <= row["ttft_ms_p95"] and 0 < row["itl_ms_median"] <= row["itl_ms_p95"]
    # keys and values of every layer, for the prompt and all new tokens but the last (its KV is never made)
    config = REGISTRY["llama-tiny"].builder.config
    per_position = 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * config["head_dim"] * 4
    assert row["kv_cache_bytes"] == per_position * batch * (prompt + new - 1)
    # The memory estimate's KV cache (bench memory, mem_estimate) is what generate measured
    spec = REGISTRY["llama-tiny"]
    assert spec.task.kv_cache_bytes(spec, BenchConfig(**{**TINY_TEXT, "model": "llama-tiny", "mode": "generate",
                                                       "prompt_len": prompt, "new_tokens": new}), batch, 4)[0] == \
        row["kv_cache_bytes"]
    assert f"KV cache: {batch} sequences x (prompt {prompt} + {new} new - 1" in row["mem_estimate"]
    assert row["flops_method"].startswith("formula: prefill")
    assert row["flops_per_sample"] == pytest.approx(row["flops_per_sample_counted"], rel=FORMULA_MARGIN)


def test_an_encoder_decoder_generates_exactly_the_tokens_asked_and_counts_its_flops(configs):
    row = run_one(f"hf:{configs['t5']}", mode="generate", prompt_len=12, new_tokens=4)
    assert row["output_tokens"] == 4 and row["flops_method"].startswith("counted")
    assert row["flops_per_sample"] == row["flops_per_sample_counted"] and row["kv_cache_bytes"] > 0


def test_a_step_marks_its_phases_on_the_window_clock():
    import time

    from bench_core.devices import Backend
    from bench_core.run.timing import timed_window
    import torch

    def step(mark):
        for _ in range(3):
            time.sleep(0.002)
            mark()
        time.sleep(0.001)
    window = timed_window(step, Backend(torch.device("cpu")), min_steps=4, min_seconds=0)
    assert window.steps == 4 and all(len(marks) == 3 for marks in window.inner_s)
    assert sum(window.step_s) == pytest.approx(window.seconds, rel=1e-9)
    assert all(0 < marks[0] < marks[1] < marks[2] < s for marks, s in zip(window.inner_s, window.step_s))


def test_generation_columns_from_a_known_window():
    # two calls of 3 tokens: first token at 0.1 s, then every 0.02 s; each call ends 0.01 s after its last mark
    window = Window(seconds=0.3, step_s=[0.15, 0.15], inner_s=[[0.1, 0.12, 0.14], [0.1, 0.12, 0.14]])
    columns = generation_columns(window, global_batch=4, prompt_len=8, new_tokens=3)
    assert columns["output_tokens"] == 3 and columns["ttft_ms_median"] == pytest.approx(100)
    assert columns["decode_s"] == pytest.approx(0.1) and columns["decode_tokens_per_s"] == pytest.approx(4 * 2 * 2 / 0.1)
    assert columns["itl_ms_median"] == pytest.approx(20) and columns["prefill_tokens_per_s"] == pytest.approx(4 * 8 * 2 / 0.2)


@pytest.mark.parametrize("precision", ["bf16", "amp-bf16", "fp16"])
def test_reduced_precisions_train_a_text_model(precision, configs):
    row = run_benchmark(BenchConfig(**{**TINY_TEXT, "model": f"hf:{configs['llama']}", "seq_len": 16,
                                       "precision": precision, "steps": 1}))[0]
    assert row["status"] in ("ok", "nan"), row["message"]  # pure fp16 may overflow: a nan row, not a crash
    assert row["precision"] == precision and row["precision_support"] in ("native", "emulated")


@pytest.mark.parametrize("argv, field, words", [
    (["--model", "gpt2", "--seq-len", "2048"], "seq_len", "gpt2 takes at most 1024 positions (n_positions)"),
    (["--model", "gpt2", "--mode", "generate", "--prompt-len", "1000", "--new-tokens", "100"], "new_tokens",
     "prompt_len + new_tokens = 1100 is beyond gpt2's 1024 positions"),
    (["--model", "bert-base", "--mode", "generate"], "mode", "generate does not apply to bert-base, an encoder"),
    (["--model", "gpt2", "--width", "64"], "width", "applies to image and 3D models only; gpt2 is a decoder"),
    (["--model", "resnet18", "--seq-len", "64"], "seq_len", "applies to text models in train and infer"),
    (["--model", "llama-tiny", "--prompt-len", "8"], "prompt_len", "applies to mode generate only"),
    (["--model", "llama-tiny", "--mode", "generate", "--new-tokens", "1"], "new_tokens", "must be >= 2"),
    (["--model", "llama-tiny", "--mode", "generate", "--seq-len", "8"], "seq_len", "give those instead"),
    (["--model", "llama-tiny", "--mode", "generate", "--compile", "default"], "compile", "allowed: off"),
    (["--model", "hf:/no/such/config.json"], "model", "no such config file"),
    (["--model", "hf:meta-llama/Llama-3.2-1B"], "model", "never downloads"),
    (["--model", "hf:no_such_type"], "model", "neither a transformers model type nor a local config file"),
])
def test_bad_text_input_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, argv, field, words):
    out = tmp_path / "out"
    assert bench(["run", *argv, "--device", "cpu", "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"bench run: error: {field}: ") and words in lines[0], lines
    assert not out.exists()


@pytest.mark.parametrize("content, words", [("{not json", "is not JSON"), ('{"n_layer": 2}', "has no model_type"),
                                            ('{"model_type": "no_such_type"}', "cannot make this configuration")])
def test_a_bad_config_file_is_refused_naming_the_model_field(tmp_path, content, words):
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(ConfigError) as err:
        BenchConfig(model=f"hf:{path}", device="cpu")
    assert err.value.field == "model" and words in str(err.value)


def test_building_text_models_makes_no_network_call(monkeypatch, configs):
    attempts = []

    def refuse(self, address):
        attempts.append(address)
        raise OSError("network blocked in this test")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    for model in ("llama-tiny", f"hf:{configs['gpt2']}", "hf:bert"):
        cfg = BenchConfig(**{**TINY_TEXT, "model": model})
        assert resolve_model(cfg.model).build(cfg) is not None
    assert attempts == []


def test_a_text_model_trains_on_two_processes(tmp_path, configs):
    rows = run_benchmark(BenchConfig(**{**TINY_TEXT, "model": f"hf:{configs['llama']}", "seq_len": 16,
                                        "nproc_per_node": 2}))
    assert rows[0]["status"] == "ok", rows[0]["message"]
    assert rows[0]["world_size"] == 2 and rows[0]["replicas_in_sync"] is True
    assert rows[0]["tokens_per_s"] == pytest.approx(2 * 2 * 16 * rows[0]["timed_steps"] / rows[0]["timed_s"], rel=1e-9)


def test_the_model_table_names_each_family_once():
    tasks = {row["task"] for row in model_table()}
    assert {"classification", "masked-lm", "causal-lm", "seq2seq-lm"} <= tasks


def _as_faster_machine(row: dict, speed: float) -> dict:
    """The same row as if measured on another host `speed` times faster (every rate and time edited)."""
    out = dict(row, run_id=f"{row['run_id']}-b", host="other-host", device_name="Other CPU")
    for name in ("samples_per_s", "samples_per_s_per_device", "batches_per_s", "throughput", "tokens_per_s",
                 "mpx_per_s", "decode_tokens_per_s", "prefill_tokens_per_s"):
        if out.get(name) is not None:
            out[name] = row[name] * speed
    for name in ("timed_s", "ttft_ms_median", "ttft_ms_p95", "itl_ms_median", "itl_ms_p95", "decode_s",
                 "step_time_ms_median"):
        if out.get(name) is not None:
            out[name] = row[name] / speed
    return out


@pytest.fixture(scope="module")
def mixed_results(tmp_path_factory):
    """resnet18 (images/s) and llama-tiny (tokens/s: train, and generate at batch 1 and 2) on this machine
    (a) and, edited, on a machine 1.5x faster (b)."""
    from bench_core import results
    a, b = tmp_path_factory.mktemp("machine-a"), tmp_path_factory.mktemp("machine-b")
    configs = [dict(model="resnet18", width=32, height=32, mode="infer"), dict(model="llama-tiny", seq_len=16),
               dict(model="llama-tiny", mode="generate", prompt_len=8, new_tokens=4, batch_size=1),
               dict(model="llama-tiny", mode="generate", prompt_len=8, new_tokens=4, batch_size=2)]
    for changes in configs:
        rows = run_benchmark(BenchConfig(**{**TINY_TEXT, "repeats": 2, **changes}))
        assert all(r["status"] == "ok" for r in rows), rows[0]["message"]
        # This checks units, not noise: the other test worker's load flags these rows, and a comparison
        # leaves flagged repeats out (tests/test_diff.py checks that).
        rows = [{**r, "noise_flags": None} for r in rows]
        results.write_run(a, rows[0]["run_id"], rows)
        results.write_run(b, rows[0]["run_id"], [_as_faster_machine(r, 1.5) for r in rows])
    return a, b


def test_a_report_of_images_and_tokens_on_two_machines_gives_each_unit_its_own_axis(mixed_results, tmp_path):
    from bench_core.summary.report import build_report
    html = build_report(list(mixed_results), tmp_path / "report.html").read_text()
    assert "could not be drawn" not in html
    assert "Throughput in images/s by model and precision" in html  # one chart per unit (the charts' alt text)
    assert "Throughput in tokens/s by model and precision" in html
    assert "never share an axis" in html
    assert "Decode tokens/s and time to first token against batch size" in html
    assert "prompt 8 + 4 new tokens" in html and "framework-level" in html


def test_machines_and_diff_compare_text_rows_in_their_unit(mixed_results):
    from bench_core import summary
    res = summary.load_results(list(mixed_results))
    table, _, _, _ = summary.relative_speed(res)
    text = table[table["model"] == "llama-tiny"]
    assert set(text["throughput_unit"]) == {"tokens/s"} and (text["ratio"].round(6) == 1.5).all()
    diff = summary.diff_results(*mixed_results)
    assert diff.compared == 4 and diff.table["configuration"].str.contains("16 tokens").any()
