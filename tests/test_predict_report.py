"""The report's Predicted GPUs section as a person reads it: one prediction per configuration and machine however many
folders hold it, a folder or machine named wherever two would otherwise look alike, and a table a 1,400 px page holds
(issue 69)."""
from pathlib import Path

import pytest

from bench_core.results.store import iter_rows, write_run
from bench_core.summary import predicted
from bench_core.summary.load import load_results

ROOT = Path(__file__).resolve().parents[1]
H200_RUN = ROOT / "gpu" / "runs" / "h200-2026-11-27"
GPUS = ["H100-SXM5-80GB", "L4", "B200"]


def kept_rows(**changes) -> list[dict]:
    """The kept H200 run's ResNet-50 AMP rows (one configuration, one machine), with `changes`."""
    return [{**r, **changes} for r in iter_rows(H200_RUN) if (r["model"], r["precision"]) == ("resnet50", "amp-fp16")]


def test_four_folders_of_one_run_give_one_prediction_per_gpu_and_name_the_folders(tmp_path, monkeypatch):
    """"A report of four result folders of the same run draws each predicted GPU once per folder: 20-25 overlapping
    bars; its table shows two figures for one configuration without saying which folder each comes from.\""""
    folders = []
    for name in ("mon", "tue", "wed", "thu"):
        write_run(tmp_path / name, "r", kept_rows())
        folders.append(tmp_path / name)
    table, notes = predicted.predicted_table(load_results(folders), GPUS)
    assert not notes and sorted(table["gpu"]) == sorted(f"1x {g}" for g in GPUS)  # once each, not once per folder
    assert table["source"].nunique() == 1 and all(n in table["source"].iloc[0] for n in ("mon", "tue", "wed", "thu"))
    drawn = []
    monkeypatch.setattr(predicted, "show_figure", lambda fig, alt: drawn.append(fig))
    predicted._chart(table)
    (ax,) = drawn[0].axes
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert len(labels) == 1 + len(GPUS) and labels[0] == "1x H200-SXM-141GB (measured)"


def test_the_same_configuration_measured_apart_is_two_lines_that_say_which_is_which(tmp_path):
    """Two folders measured the same configuration on two machines: two predictions of each GPU, never pooled, each
    naming its machine and folder; their measured figures differ and the table says where each came from."""
    write_run(tmp_path / "a", "r", kept_rows(host="node-a"))
    write_run(tmp_path / "b", "r", [{**r, "samples_per_s": r["samples_per_s"] / 2, "throughput": r["throughput"] / 2}
                                    for r in kept_rows(host="node-b", gpu_uuid="GPU-99999999")])
    table, _ = predicted.predicted_table(load_results([tmp_path / "a", tmp_path / "b"]), ["H100-SXM5-80GB"])
    assert len(table) == 2 and table["measured"].nunique() == 2
    assert {s.split(" · ")[1] for s in table["source"]} == {"node-a", "node-b"}
    assert {s.split(" · ")[-1] for s in table["source"]} == {"a", "b"}
    assert table["configuration"].nunique() == 1


def test_the_predicted_table_fits_a_1400_px_page_and_keeps_every_sentence_below_it(tmp_path):
    """"In the report at 1,400 px the Predicted GPUs table is cut on the right": the table shows short cells (nine
    columns, none over 60 characters, and its narrowest layout, each column as wide as its longest word, about
    1,000 px at the report's 7 px a character), every sentence (what binds, the interval in words, the published
    pair, the price) in the details table below it."""
    write_run(tmp_path / "one", "r", kept_rows())
    table, _ = predicted.predicted_table(load_results([tmp_path / "one"]), GPUS)
    shown, details = predicted.shown_tables(table)
    columns = list(predicted.SHOWN)
    assert len(columns) <= 9
    cells = {c: [str(v) for v in [predicted.SHOWN[c], *shown[c]]] for c in columns}
    assert max(len(v) for c in columns for v in cells[c]) <= 60
    narrowest = {c: max(len(word) for v in cells[c] for word in v.split()) for c in columns}
    assert sum(narrowest.values()) * 7 + 2 * 8 * len(columns) <= 1100, narrowest  # 8 px padding a side
    h100 = details[details["prediction"].str.contains("H100")].iloc[0]
    assert h100["more"].startswith("the 1x H100-SXM5-80GB measures ") and "lambdal resnet50" in h100["more"]
    assert h100["binds"] and len(details) == len(shown)


@pytest.fixture(autouse=True)
def _no_display(monkeypatch):
    """(The section's helpers display into a notebook; these tests read their tables and figures instead.)"""
    monkeypatch.setattr(predicted, "show_table", lambda *a, **k: None)
