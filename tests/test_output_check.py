"""A training row whose infer mode builds another model (Whisper's encoder alone) is checked on its own
training call, where it failed on a configuration error about infer; FSDP on one process says why it is not
checked. Real models on the CPU, tiny sizes."""
import torch

from bench_core import BenchConfig
from bench_core.devices import Backend
from bench_core.results import fidelity
from bench_core.run import reference
from bench_core.run.runner import _make_step
from bench_core.workload.models import REGISTRY

CPU = Backend.for_device(torch.device("cpu"))


def test_a_training_row_is_checked_on_its_training_call_not_refused_as_an_infer_configuration():
    # Whisper trains encoder and decoder on labels of seq_len tokens; its infer mode is the encoder alone and
    # refuses seq_len: the check's forward was built as an infer configuration and failed on that ConfigError.
    cfg = BenchConfig(model="whisper-micro", batch_size=2, steps=1, warmup_steps=1, repeats=1, min_seconds=0,
                      device="cpu", precision="amp-bf16")
    found = reference.check_outputs(cfg, REGISTRY[cfg.model], CPU, _make_step)
    assert cfg.seq_len and found["output_check"] == fidelity.WITHIN, found["output_check"]
    assert found["loss_rel_error"] is not None and 0 < found["output_rel_error"] <= 0.1
    # FSDP2 on one process runs bf16 parameters, not autocast: the check says it cannot build that, not why infer
    fsdp = BenchConfig(model="llama-tiny", seq_len=16, batch_size=2, steps=1, warmup_steps=1, repeats=1, min_seconds=0,
                       device="cpu", precision="amp-bf16", parallelism="fsdp")
    said = reference.check_outputs(fsdp, REGISTRY[fsdp.model], CPU, _make_step)["output_check"]
    assert said.startswith("not checked: parallelism fsdp (the check builds the model unwrapped") and "infer" not in said
