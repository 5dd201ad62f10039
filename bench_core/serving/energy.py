"""The device energy of a serving point: the project's telemetry sampler (measure/telemetry.py:
NVML on a GPU, RAPL on a CPU where it is readable) around each timed point, on the device the
server runs on, and the joules per output token from it.

Only a server this process started is sampled: one attached with server_url may run on another
host, so its energy stays empty and telemetry_note says why. The device read is the
configuration's (`device`, auto: the first GPU this process sees, which is the one an engine
started here uses by default); a server spread over several GPUs (tensor parallel) is read on
that one only, and the note says so. The engine's own processes are the measured work on the
device, not "other processes".
"""
from __future__ import annotations

import torch

from bench_core.devices import Backend, resolve_device
from bench_core.measure import telemetry
from bench_core.serving.server import Server

# Sampler columns a serving row keeps. window_peak_rss_bytes is left out: it would be the client's
# RSS alone, not the server's.
KEPT = ("power_w_mean", "power_w_max", "energy_j", "energy_method", "power_method", "gpu_util_pct_mean",
        "sm_clock_mhz_mean", "sm_clock_mhz_min", "gpu_mem_used_bytes", "gpu_temp_c_max", "throttle_reasons",
        "cpu_util_pct_mean", "cpu_steal_cores", "noise_flags", "telemetry_note")


class PointEnergy:
    """`with PointEnergy(cfg_device, server) as energy: <the point>`; then `energy.columns(output_tokens)`."""

    def __init__(self, device_name: str, server: Server):
        self.server = server
        self.sampler = None
        self.why_not = ""
        if not server.child:
            self.why_not = (f"energy empty: attached to {server.url} (server_url), whose device may be on another "
                            "host; only a server started here is sampled")
        else:
            self.sampler = telemetry.Sampler(Backend.for_device(resolve_device(device_name)), also_ours=server.pids)

    def __enter__(self) -> "PointEnergy":
        if self.sampler:
            self.sampler.__enter__()
        return self

    def __exit__(self, *exc) -> bool:
        if self.sampler:
            self.sampler.__exit__(*exc)
        return False

    def columns(self, output_tokens: int | None) -> dict:
        """The kept telemetry columns and energy_j_per_output_token (energy_j / the ok requests'
        output tokens; empty without both)."""
        if not self.sampler:
            return {"telemetry_note": self.why_not}
        cols = {k: v for k, v in self.sampler.columns().items() if k in KEPT}
        energy = cols.get("energy_j")
        cols["energy_j_per_output_token"] = energy / output_tokens if energy and output_tokens else None
        if self.sampler.device.type == "cuda" and torch.cuda.device_count() > 1:
            note = (f"energy of {self.sampler.device} only (the configuration's device): a server spread over "
                    "several GPUs draws more")
            cols["telemetry_note"] = "; ".join(n for n in (cols.get("telemetry_note"), note) if n)
        return cols
