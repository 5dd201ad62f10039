"""Speech workloads: Whisper-shaped encoder-decoders built offline from configurations, trained and
encoding in audio seconds per second, generating in the text family's units; every bad input refused
in one line; and a report that draws the diffusion and speech families each in its own unit."""
import json
import socket

import pytest

from bench_core import BenchConfig, run_benchmark
from bench_core.cli import main as bench
from bench_core.workload.models import REGISTRY, count_parameters, resolve_model

TINY_SPEECH = dict(model="whisper-micro", batch_size=2, steps=3, warmup_steps=1, repeats=1, min_seconds=0,
                   device="cpu")
MICRO_SECONDS = 2.0  # whisper-micro's encoder takes 200 frames: 2 s at 100 frames a second


def run_one(**changes) -> dict:
    rows = run_benchmark(BenchConfig(**{**TINY_SPEECH, **changes}))
    assert rows[0]["status"] == "ok", rows[0]["message"]
    return rows[0]


def test_bench_models_lists_the_whisper_shapes_at_their_published_sizes(capsys):
    assert bench(["models", "--json"]) == 0
    listed = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    # OpenAI's model card sizes (74M, 244M, 1550M) are rounded; transformers builds 72.6M, 241.7M, 1543.5M.
    for name, size in (("whisper-base", 74e6), ("whisper-small", 244e6), ("whisper-large-v3", 1550e6)):
        assert listed[name]["params"] == pytest.approx(size, rel=0.03), name
        assert listed[name]["task"] == "speech-to-text" and listed[name]["default_input"] == "30 s audio"
    assert listed["whisper-micro"]["default_input"] == "2 s audio"
    assert REGISTRY["whisper-large-v3"].builder.mel_bins == 128 and REGISTRY["whisper-small"].builder.mel_bins == 80


def test_training_on_log_mel_frames_is_in_audio_seconds_per_second():
    row = run_one(seq_len=16)
    assert row["task"] == "speech-to-text" and row["throughput_unit"] == "audio s/s"
    assert row["sample_unit"] == "utterances/s"
    assert row["audio_s_per_s"] == row["throughput"] == pytest.approx(
        2 * MICRO_SECONDS * row["timed_steps"] / row["timed_s"], rel=1e-9)
    assert row["throughput"] == pytest.approx(row["samples_per_s"] * MICRO_SECONDS, rel=1e-9)
    assert row["input_shape"] == "200 frames (2 s) + 16 tokens" and row["audio_frames"] == 200
    assert row["loss_finite"] and row["flops_method"].startswith("counted") and 0 < row["mfu"] <= 1
    assert row["attn_implementation"] == "sdpa" and row["attention_kernel"] == "flash (cpu)"


def test_infer_runs_the_encoder_alone_in_audio_seconds_per_second():
    row = run_one(mode="infer")
    cfg = BenchConfig(**{**TINY_SPEECH, "mode": "train"})
    whole = count_parameters(resolve_model(cfg.model).build(cfg))
    assert 0 < row["params_count"] < whole / 2  # the encoder's parameters, not the decoder's and its vocabulary
    assert row["throughput_unit"] == "audio s/s" and row["input_shape"] == "200 frames (2 s)"
    assert row["audio_s_per_s"] == pytest.approx(2 * MICRO_SECONDS * row["timed_steps"] / row["timed_s"], rel=1e-9)


def test_generate_is_timed_in_phases_with_audio_seconds_beside_the_tokens():
    new, batch = 5, 2
    row = run_one(mode="generate", new_tokens=new, batch_size=batch)
    calls, seconds = row["timed_steps"], row["timed_s"]
    assert row["throughput_unit"] == "tokens/s" and row["output_tokens"] == new
    assert row["tokens_per_s"] == row["throughput"] == pytest.approx(batch * new * calls / seconds, rel=1e-9)
    assert row["audio_s_per_s"] == pytest.approx(batch * MICRO_SECONDS * calls / seconds, rel=1e-9)
    assert row["decode_tokens_per_s"] == pytest.approx(batch * (new - 1) * calls / row["decode_s"], rel=1e-9)
    assert row["ttft_ms_median"] > 0 and row["prefill_tokens_per_s"] is None  # the prompt is audio, not tokens
    assert row["input_shape"] == f"200 frames (2 s) + {new} new tokens"
    # keys and values of every decoder layer: self-attention over the start token and the new tokens but the
    # last (its KV is never made), cross-attention over the encoder's 100 positions
    config = REGISTRY["whisper-micro"].builder.config
    per_position = 2 * config["decoder_layers"] * config["d_model"] * 4
    assert row["kv_cache_bytes"] == per_position * batch * (new + config["max_source_positions"])


@pytest.mark.parametrize("argv, field, words", [
    (["--audio-frames", "3000"], "audio_frames", "whisper-micro's encoder takes exactly 200 frames"),
    (["--model", "whisper-small", "--audio-frames", "1500"], "audio_frames", "takes exactly 3000 frames"),
    (["--audio-frames", "0"], "audio_frames", "must be >= 1"),
    (["--model", "resnet18", "--audio-frames", "3000"], "audio_frames", "applies to speech models only"),
    (["--mode", "infer", "--seq-len", "16"], "seq_len", "infer runs whisper-micro's encoder alone"),
    (["--seq-len", "100"], "seq_len", "takes at most 64 positions (max_target_positions)"),
    (["--new-tokens", "8"], "new_tokens", "applies to mode generate only"),
    (["--mode", "generate", "--new-tokens", "64"], "new_tokens", "beyond whisper-micro's 64 decoder positions"),
    (["--mode", "generate", "--seq-len", "8"], "seq_len", "give that instead"),
    (["--mode", "generate", "--prompt-len", "8"], "prompt_len", "applies to text models in generate only"),
    (["--mode", "generate", "--compile", "default"], "compile", "allowed: off"),
    (["--latent-size", "8"], "latent_size", "applies to diffusion models only"),
    (["--channels-last"], "channels_last", "applies to image models only"),
])
def test_bad_speech_input_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, argv, field, words):
    out = tmp_path / "out"
    model = [] if "--model" in argv else ["--model", "whisper-micro"]
    assert bench(["run", *model, *argv, "--device", "cpu", "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"bench run: error: {field}: ") and words in lines[0], lines
    assert not out.exists()


def test_building_speech_models_makes_no_network_call(monkeypatch):
    attempts = []

    def refuse(self, address):
        attempts.append(address)
        raise OSError("network blocked in this test")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    for mode in ("train", "infer"):
        cfg = BenchConfig(**{**TINY_SPEECH, "mode": mode})
        assert resolve_model(cfg.model).build(cfg) is not None
    assert attempts == []


@pytest.fixture(scope="module")
def family_results(tmp_path_factory):
    """Diffusion (train, infer) and speech (train, infer, generate) rows of this machine, in one folder."""
    from bench_core import results
    folder = tmp_path_factory.mktemp("families")
    configs = [dict(model="sd-unet-tiny"), dict(model="dit-tiny", mode="infer", denoise_steps=10),
               dict(model="whisper-micro", seq_len=8), dict(model="whisper-micro", mode="infer"),
               dict(model="whisper-micro", mode="generate", new_tokens=4)]
    for changes in configs:
        rows = run_benchmark(BenchConfig(**{**TINY_SPEECH, "repeats": 2, "steps": 2, **changes}))
        assert all(r["status"] == "ok" for r in rows), rows[0]["message"]
        results.write_run(folder, rows[0]["run_id"], rows)
    return folder


def test_a_report_draws_each_family_in_its_own_unit(family_results, tmp_path):
    from bench_core.summary.report import build_report
    html = build_report([family_results], tmp_path / "report.html").read_text()
    assert "could not be drawn" not in html
    for unit in ("images/s", "denoising steps/s", "audio s/s", "tokens/s"):  # one chart per unit (alt text) ...
        assert (f"Throughput in {unit} by model and precision" in html  # ... or, for a single figure, none
                or f"One figure in {unit}, nothing to compare it with in a chart" in html), unit
    assert "never share an axis" in html
    assert "4x8x8 latent (64 px), CFG, 10 steps" in html and "200 frames (2 s) + 4 new tokens" in html
    # Speech generate, as text's, in its table; at one batch size there is no trade-off to chart.
    assert "time to first token, ms (median)" in html
    assert "Decode tokens/s and time to first token against batch size" not in html
    assert "images/s at its denoising steps" in html and "audio s/s (speech: whole transcriptions)" in html


def test_the_sequence_table_compares_a_formula_with_the_count_only_where_there_is_a_formula(family_results):
    from bench_core import summary
    table = summary.sequence_table(summary.load_results([family_results]))
    (whisper,) = table[table["model"] == "whisper-micro"].to_dict("records")  # generate: counted FLOPs
    assert whisper["flops"] == "counted" and whisper["formula_vs_counted"] != whisper["formula_vs_counted"]  # NaN
