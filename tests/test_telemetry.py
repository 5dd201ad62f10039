"""The telemetry sampler: NVML through a stand-in `pynvml` (no GPU here: the one place a
stand-in is right), RAPL through a temporary powercap directory, and the real CPU path."""
import os
import sys
import time
import types

import pynvml as real_pynvml  # nvidia-ml-py: its constants and error classes load without a driver
import pytest
import torch

from bench_core.measure import efficiency, telemetry
from bench_core.measure import rapl
from bench_core.devices import Backend
from bench_core.results.disturbed import disturbances

UUID_A = "GPU-11111111-2222-3333-4444-555555555555"
UUID_B = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
MIG_UUID = "MIG-99999999-8888-7777-6666-555555555555"
MIG_HANDLE = 100


def nvml_error(code):
    """The error nvidia-ml-py raises for an NVML return code (its own class, e.g. NVMLError_NoPermission)."""
    return real_pynvml.NVMLError(code)


def make_pynvml(devices, init_error=None, event_reasons=True, lookups=True):
    """A stand-in `pynvml` over fixed devices (no driver here): each a dict of counters; a key
    listed in the device's `unsupported` raises NVML's NOT_SUPPORTED instead, and a device with
    `refused=True` raises NO_PERMISSION when opened, as a GPU outside the job's cgroup does.
    Names, constants and error classes are nvidia-ml-py's own. `lookups=False`: a binding
    without the by-UUID / by-bus-id look-ups (only the index walk is left)."""
    m = types.ModuleType("pynvml")
    for name in ("NVMLError", "NVML_CLOCK_SM", "NVML_TEMPERATURE_GPU", "NVML_SUCCESS", "NVML_FI_DEV_POWER_INSTANT"):
        setattr(m, name, getattr(real_pynvml, name))
    m.calls = {"shutdown": 0, "by_index": []}

    def device_of(handle):
        """Handles are indices; MIG_HANDLE + i is GPU i's MIG instance (its own dict, 'mig')."""
        return devices[handle - MIG_HANDLE]["mig"] if handle >= MIG_HANDLE else devices[handle]

    def read(key):
        def fn(handle, *args):
            dev = device_of(handle)
            if key in dev.get("unsupported", ()):
                raise nvml_error(real_pynvml.NVML_ERROR_NOT_SUPPORTED)
            value = dev[key]
            return value() if callable(value) else value
        return fn

    def open_device(index):
        if devices[index].get("refused"):
            raise nvml_error(real_pynvml.NVML_ERROR_NO_PERMISSION)
        return index

    def by_index(index):
        m.calls["by_index"].append(index)
        return open_device(index)

    def by_uuid(uuid):
        for i, dev in enumerate(devices):
            if dev["uuid"] == uuid:
                return open_device(i)
            if dev.get("mig", {}).get("uuid") == uuid:
                return MIG_HANDLE + open_device(i)
        raise nvml_error(real_pynvml.NVML_ERROR_NOT_FOUND)

    def mig_parent(handle):
        if handle < MIG_HANDLE:
            raise nvml_error(real_pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return handle - MIG_HANDLE

    def mig_mode(handle):
        if handle >= MIG_HANDLE:
            raise nvml_error(real_pynvml.NVML_ERROR_NOT_SUPPORTED)
        mode = real_pynvml.NVML_DEVICE_MIG_ENABLE if "mig" in devices[handle] else real_pynvml.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def by_bus(bus_id):
        for i, dev in enumerate(devices):
            if bus_id.lower() == dev["bus"].lower():
                return open_device(i)
        raise nvml_error(real_pynvml.NVML_ERROR_NOT_FOUND)

    def init():
        if init_error:
            raise init_error

    def shutdown():
        m.calls["shutdown"] += 1

    def field_values(handle, field_ids):
        """nvmlDeviceGetFieldValues: nvidia-ml-py's own structs; a field the device lacks (key
        'power_instant_mw' absent) comes back with nvmlReturn NOT_SUPPORTED, as from a driver."""
        values = (real_pynvml.c_nvmlFieldValue_t * len(field_ids))()
        for value, field_id in zip(values, field_ids):
            value.fieldId = field_id
            mw = devices[handle].get("power_instant_mw") if field_id == real_pynvml.NVML_FI_DEV_POWER_INSTANT else None
            if mw is None:
                value.nvmlReturn = real_pynvml.NVML_ERROR_NOT_SUPPORTED
            else:
                value.nvmlReturn = real_pynvml.NVML_SUCCESS
                value.valueType = real_pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                value.value.uiVal = mw
        return values

    m.nvmlInit = init
    m.nvmlDeviceGetFieldValues = field_values
    m.nvmlShutdown = shutdown
    m.nvmlDeviceGetCount = lambda: len(devices)
    m.nvmlDeviceGetHandleByIndex = by_index
    m.nvmlDeviceGetDeviceHandleFromMigDeviceHandle = mig_parent
    m.nvmlDeviceGetMigMode = mig_mode
    m.NVML_DEVICE_MIG_ENABLE = real_pynvml.NVML_DEVICE_MIG_ENABLE
    if lookups:
        m.nvmlDeviceGetHandleByUUID = by_uuid
        m.nvmlDeviceGetHandleByPciBusId = by_bus
    m.nvmlDeviceGetUUID = read("uuid")
    m.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=device_of(h)["bus"])
    m.nvmlDeviceGetPowerUsage = read("power_mw")
    m.nvmlDeviceGetTotalEnergyConsumption = read("energy_mj")
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=read("util")(h))
    m.nvmlDeviceGetClockInfo = read("sm_mhz")
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=read("mem_used")(h))
    m.nvmlDeviceGetTemperature = read("temp")
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: [types.SimpleNamespace(pid=p) for p in read("pids")(h)]
    m.nvmlDeviceGetCurrentClocksThrottleReasons = read("reasons")
    m.nvmlDeviceGetEnforcedPowerLimit = read("power_limit_mw")
    if event_reasons:
        m.nvmlDeviceGetCurrentClocksEventReasons = read("reasons")
    return m


def gpu(uuid, bus, power_mw=200_000, **extra):
    start = time.perf_counter()  # the energy counter (mJ) runs at power_mw, as a real one would
    dev = dict(uuid=uuid, bus=bus, power_mw=power_mw, power_limit_mw=400_000, util=90, sm_mhz=1410, mem_used=5 * 2**30, temp=60,
               energy_mj=lambda: 1_000_000 + int(power_mw * (time.perf_counter() - start)),
               pids=[os.getpid()], reasons=0)
    dev.update(extra)
    return dev


@pytest.fixture
def cuda_device(monkeypatch):
    """torch sees one GPU, cuda:0, whose properties we choose (no hardware here)."""
    props = {}

    def get_device_properties(index):
        return types.SimpleNamespace(**props)
    monkeypatch.setattr(torch.cuda, "get_device_properties", get_device_properties)

    def use(uuid="", domain=0, bus=0x3B, dev=0):
        props.update(uuid=uuid.removeprefix("GPU-"), pci_domain_id=domain, pci_bus_id=bus, pci_device_id=dev)
        # The sampler reads only backend.device; a real CudaBackend would initialise CUDA.
        return types.SimpleNamespace(device=torch.device("cuda", 0))
    return use


# A window long enough that a few ms between a counter's read and its time stamp (the process
# preempted there, on a loaded CI host) stays within the 2 % the power assertions allow: at 0.12 s,
# 3.7 ms made 300 W read 291 W (a CI run of three test workers on two cores).
WINDOW_S = 0.3


def sample(backend, seconds=WINDOW_S, **kwargs):
    with telemetry.Sampler(backend, **kwargs) as sampler:
        time.sleep(seconds)
    return sampler.columns()


def device_flags(flags):
    """The flags about the GPU: a shared CI host may add its own other-processes-on-cpu flag, a cloud VM cpu-steal."""
    kept = [f for f in (flags or "").split(";") if f and not f.startswith(("other-processes-on-cpu", "cpu-steal"))]
    return ";".join(kept) or None


def timed_sample(backend, seconds=WINDOW_S, **kwargs):
    """The columns and the wall seconds the window took (bounds for the energy counter)."""
    start = time.perf_counter()
    cols = sample(backend, seconds, **kwargs)
    return cols, time.perf_counter() - start


def counter_power(backend, watts, **kwargs):
    """The columns of a window, checked to give a fake counter running at `watts` as power_w_mean.
    Both edge reads fall inside the sampled span (wall seconds) and the window's sleep lies between
    them, so however long a loaded host delays a read, the counter's power lies within
    watts x [WINDOW_S / wall, wall / WINDOW_S]: a bound that holds on any machine, and on an idle
    one is within a fraction of a percent (a fixed 2 % failed when a read was preempted for 4 ms)."""
    cols, wall = timed_sample(backend, **kwargs)
    assert watts * WINDOW_S / wall <= cols["power_w_mean"] <= watts * wall / WINDOW_S, (cols["power_w_mean"], wall)
    assert cols["power_method"] == "energy-counter"
    return cols


def test_energy_from_counter_and_every_gpu_column(monkeypatch, cuda_device):
    device = gpu(UUID_A, "00000000:3B:00.0", power_instant_mw=210_000)
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml([device]))
    cols, wall = timed_sample(cuda_device(UUID_A))
    assert cols["energy_method"] == "nvml-counter"
    assert 200 * WINDOW_S <= cols["energy_j"] <= 200 * wall  # the counter, read at both edges only
    assert cols["power_method"] == "energy-counter"
    assert 200 * WINDOW_S / wall <= cols["power_w_mean"] <= 200 * wall / WINDOW_S  # see counter_power
    assert cols["power_w_max"] == pytest.approx(210.0)  # from the instantaneous samples
    assert cols["gpu_util_pct_mean"] == 90 and cols["sm_clock_mhz_min"] == 1410
    assert cols["gpu_mem_used_bytes"] == 5 * 2**30 and cols["gpu_temp_c_max"] == 60
    assert cols["throttle_reasons"] is None and device_flags(cols.get("noise_flags")) is None
    assert cols["telemetry_note"] is None
    assert sys.modules["pynvml"].calls["shutdown"] == 1


def test_a_gpu_window_is_read_a_few_times_a_second(monkeypatch, cuda_device):
    """Issue 59 item 2: each reading takes the GIL from the step's thread (seven NVML queries), and at batch 1
    a GPU step is the host's time: 4 readings a second inside the window, not 20, besides its two edges."""
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml([gpu(UUID_A, "00000000:3B:00.0")]))
    with telemetry.Sampler(cuda_device(UUID_A)) as sampler:
        time.sleep(1.0)
    assert 2 <= sampler.ticks <= 2 + 4 + 1  # a late tick at the end still counts
    assert sampler.columns()["power_method"] == "energy-counter"


def test_power_integration_when_energy_counter_not_supported(monkeypatch, cuda_device):
    device = gpu(UUID_A, "00000000:3B:00.0", unsupported={"energy_mj"})
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml([device]))
    start = time.perf_counter()
    cols = sample(cuda_device(UUID_A), seconds=0.3)
    wall = time.perf_counter() - start
    assert cols["energy_method"] == "power-integration"
    assert 200 * 0.3 <= cols["energy_j"] <= 200 * wall
    assert "energy from power samples: NVML energy counter Not Supported" in cols["telemetry_note"]


def test_an_energy_counter_that_did_not_advance_is_not_zero_joules(monkeypatch, cuda_device, tiny_config):
    # A short window (the self-test's) between two refreshes of NVML's counter: the same value twice.
    device = gpu(UUID_A, "00000000:3B:00.0", energy_mj=5_000_000)
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml([device]))
    cols = sample(cuda_device(UUID_A), seconds=0.2)
    assert cols["energy_method"] == "power-integration" and cols["energy_j"] > 0
    assert "NVML energy counter did not advance over the" in cols["telemetry_note"]
    derived = efficiency.derive({**cols, "samples_per_s": 100.0, "timed_s": 0.2}, tiny_config())
    assert 0 < derived["samples_per_j"] < float("inf")


def test_mean_power_without_the_energy_counter_comes_from_instantaneous_samples(monkeypatch, cuda_device):
    device = gpu(UUID_A, "00000000:3B:00.0", power_instant_mw=250_000, unsupported={"energy_mj"})
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml([device]))
    cols = sample(cuda_device(UUID_A))
    assert cols["power_method"] == "nvml-instant" and cols["power_w_mean"] == pytest.approx(250.0)
    assert "nvmlDeviceGetPowerUsage" not in cols["telemetry_note"]


def test_the_one_second_power_average_is_named_where_it_is_all_there_is(monkeypatch, cuda_device):
    # No instantaneous field (older driver or GPU): nvmlDeviceGetPowerUsage, a 1 s average on Ampere+.
    device = gpu(UUID_A, "00000000:3B:00.0", unsupported={"energy_mj"})
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml([device]))
    cols = sample(cuda_device(UUID_A))
    assert cols["power_method"] == "nvml-power-usage" and cols["power_w_mean"] == pytest.approx(200.0)
    assert "power samples from nvmlDeviceGetPowerUsage (instantaneous power: Not Supported): a 1 s average" \
        in cols["telemetry_note"]
    assert "power_w_mean lags the window" in cols["telemetry_note"]


def test_a_not_supported_query_empties_only_its_column(monkeypatch, cuda_device):
    device = gpu(UUID_A, "00000000:3B:00.0", unsupported={"temp", "util"})
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml([device]))
    cols = counter_power(cuda_device(UUID_A), 200.0)
    assert cols["gpu_temp_c_max"] is None and cols["gpu_util_pct_mean"] is None
    assert cols["energy_method"] == "nvml-counter"
    assert "nvml temperature: Not Supported" in cols["telemetry_note"]
    assert "nvml utilization: Not Supported" in cols["telemetry_note"]


def test_throttle_reason_is_decoded_and_flagged(monkeypatch, cuda_device, tiny_config):
    device = gpu(UUID_A, "00000000:3B:00.0", reasons=0x1 | 0x40)  # gpu_idle | hw_thermal_slowdown
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml([device]))
    cols = sample(cuda_device(UUID_A))
    assert cols["throttle_reasons"] == "gpu_idle;hw_thermal_slowdown"
    flags = efficiency.derive({**cols, "step_time_cv": 0.01, "timed_s": 1.0}, tiny_config())["noise_flags"]
    assert device_flags(flags) == "throttle(hw_thermal_slowdown)"  # idle is a state, not throttling


def test_a_gpu_at_its_power_cap_is_said_so_not_disturbed(monkeypatch, cuda_device, tiny_config):
    # An H200 under ResNet-50 amp-fp16 channels_last: 689 W of its 700 W, sw_power_cap, SM clock 1605-1980 MHz.
    h200 = gpu(UUID_A, "00000000:3B:00.0", power_mw=689_000, power_instant_mw=689_000, power_limit_mw=700_000,
               reasons=0x4)
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml([h200]))
    cols = sample(cuda_device(UUID_A))
    assert cols["throttle_reasons"] == "sw_power_cap" and cols["power_limit_w"] == 700.0
    fell = {**cols, "power_w_mean": 689.0, "sm_clock_mhz_mean": 1833.0, "sm_clock_mhz_min": 1605.0,
            "step_time_cv": 0.01, "timed_s": 1.0}
    flags = device_flags(efficiency.derive(fell, tiny_config())["noise_flags"])
    assert flags == "power-capped(689 W of 700 W cap, SM clock min 1605 mean 1833 MHz)"  # the drop is the cap's
    assert disturbances(flags) == ""
    # At the cap with a steady clock: still said. Touching it at 400 W of 700 W with a steady clock: recorded only.
    steady = {**fell, "sm_clock_mhz_min": 1800.0}
    assert device_flags(efficiency.derive(steady, tiny_config())["noise_flags"]).startswith("power-capped(689 W")
    assert device_flags(efficiency.derive({**steady, "power_w_mean": 400.0}, tiny_config())["noise_flags"]) is None
    # A thermal slowdown beside the cap is still a disturbance, and the clock drop with it.
    hot = {**fell, "throttle_reasons": "sw_power_cap;hw_thermal_slowdown"}
    flags = device_flags(efficiency.derive(hot, tiny_config())["noise_flags"])
    assert disturbances(flags) == "throttle, clock-drop" and "power-capped(689 W" in flags


def test_throttle_reasons_fall_back_to_the_old_query(monkeypatch, cuda_device):
    device = gpu(UUID_A, "00000000:3B:00.0", reasons=0x40)
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml([device], event_reasons=False))
    assert sample(cuda_device(UUID_A))["throttle_reasons"] == "hw_thermal_slowdown"


def test_uuid_mapping_ignores_nvml_index_order(monkeypatch, cuda_device):
    # CUDA_VISIBLE_DEVICES=1: torch's cuda:0 is NVML's device 1.
    devices = [gpu(UUID_A, "00000000:3B:00.0", power_mw=100_000), gpu(UUID_B, "00000000:86:00.0", power_mw=300_000)]
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml(devices))
    counter_power(cuda_device(UUID_B, bus=0x86), 300.0)
    counter_power(cuda_device(UUID_A, bus=0x3B), 100.0)


def test_pci_bus_id_mapping_when_uuid_is_unknown(monkeypatch, cuda_device):
    devices = [gpu(UUID_A, "00000000:3B:00.0", power_mw=100_000), gpu(UUID_B, "00000000:86:00.0", power_mw=300_000)]
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml(devices))
    cols = counter_power(cuda_device("", bus=0x86), 300.0)
    assert "matched by PCI bus id" in cols["telemetry_note"]


@pytest.mark.parametrize("lookups", [True, False])
def test_a_gpu_the_job_may_not_open_leaves_this_gpus_columns_filled(monkeypatch, cuda_device, lookups):
    # SLURM ConstrainDevices / a container: NVML counts both GPUs, opening the other one (index 0)
    # raises NO_PERMISSION. torch's cuda:0 is NVML's index 1.
    devices = [gpu(UUID_A, "00000000:3B:00.0", refused=True), gpu(UUID_B, "00000000:86:00.0", power_mw=300_000)]
    fake = make_pynvml(devices, lookups=lookups)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    cols = counter_power(cuda_device(UUID_B, bus=0x86), 300.0)
    assert cols["energy_method"] == "nvml-counter"
    assert "gpu columns empty" not in (cols["telemetry_note"] or "")
    if lookups:  # asked for by UUID: the GPU outside the job is never opened
        assert fake.calls["by_index"] == []


def test_no_gpu_opened_names_the_indices_refused(monkeypatch, cuda_device):
    devices = [gpu(UUID_A, "00000000:3B:00.0", refused=True)]
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml(devices, lookups=False))
    cols = sample(cuda_device(UUID_B, bus=0x86))
    assert cols.get("power_w_mean") is None
    assert "indices not opened: 0 (Insufficient Permissions)" in cols["telemetry_note"]


def mig_gpu(**slice_extra):
    """An A100 in MIG mode: power, energy, clocks only for the whole GPU (another tenant's pid 4242
    runs on another slice); this process's slice has its own memory and process list."""
    slice_ = dict(uuid=MIG_UUID, bus="00000000:3B:00.0", mem_used=3 * 2**30, pids=[os.getpid()],
                  unsupported={"power_mw", "energy_mj", "util", "sm_mhz", "temp", "reasons"})
    slice_.update(slice_extra)
    return gpu(UUID_A, "00000000:3B:00.0", power_mw=350_000, power_instant_mw=360_000,
               pids=[os.getpid(), 4242], mig=slice_)


@pytest.mark.parametrize("slice_uuid", [MIG_UUID, "MIG-GPU-11111111-2222-3333-4444-555555555555/1/0"])
def test_a_mig_slice_gets_no_power_energy_or_per_joule_figures(monkeypatch, cuda_device, tiny_config, slice_uuid):
    # torch's uuid of the instance; NVML finds it as MIG-<uuid> (driver R470+) or, with the old
    # MIG-GPU-.../gi/ci names, only the whole GPU by PCI bus id (MIG mode on).
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml([mig_gpu(uuid=slice_uuid)]))
    cols = sample(cuda_device(MIG_UUID, bus=0x3B))
    for name in ("power_w_mean", "power_w_max", "energy_j", "energy_method", "power_method"):
        assert cols.get(name) is None, name
    assert "this is a MIG slice and NVML measures only the whole GPU (every slice's work: mean 350 W" \
        in cols["telemetry_note"]
    derived = efficiency.derive({**cols, "samples_per_s": 100.0, "timed_s": 0.12}, tiny_config())
    assert derived.get("samples_per_j") is None and derived.get("samples_per_s_per_w") is None
    assert derived.get("j_per_1k_samples") is None
    if slice_uuid == MIG_UUID:  # the slice's own handle: its memory, its processes (the other tenant is not ours)
        assert cols["gpu_mem_used_bytes"] == 3 * 2**30
        assert device_flags(cols.get("noise_flags")) is None


def test_a_whole_gpu_found_by_bus_id_keeps_its_power(monkeypatch, cuda_device):
    # Not MIG (mode off): a bus-id match is the whole GPU, and the readings are this workload's.
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml([gpu(UUID_A, "00000000:3B:00.0")]))
    cols = counter_power(cuda_device("", bus=0x3B), 200.0)
    assert "MIG" not in cols["telemetry_note"]


def test_no_matching_device_leaves_columns_empty(monkeypatch, cuda_device):
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml([gpu(UUID_A, "00000000:3B:00.0")]))
    cols = sample(cuda_device(UUID_B, bus=0x86))
    assert cols.get("power_w_mean") is None and cols.get("energy_j") is None
    assert "no NVML device matches cuda:0" in cols["telemetry_note"]


def test_other_process_on_the_device_is_a_noise_flag(monkeypatch, cuda_device):
    device = gpu(UUID_A, "00000000:3B:00.0", pids=[os.getpid(), 4242])
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml([device]))
    flags = sample(cuda_device(UUID_A))["noise_flags"]
    assert device_flags(flags) == "other-processes-on-device(pid 4242)"


def test_other_processes_on_the_host_cpu_are_a_noise_flag():
    assert telemetry._foreign_cpu_flag(others_s=1.5, wall_s=2.0) == "other-processes-on-cpu(0.75 cores)"
    assert telemetry._foreign_cpu_flag(others_s=0.1, wall_s=2.0) is None


def test_without_nvml_library_nothing_fails(monkeypatch, cuda_device):
    fake = make_pynvml([], init_error=nvml_error(real_pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    cols = sample(cuda_device(UUID_A))
    assert cols.get("power_w_mean") is None
    assert cols["telemetry_note"] == "gpu columns empty: NVML unavailable (NVML Shared Library Not Found)"
    assert cols["cpu_util_pct_mean"] is not None


def test_cpu_device_says_why_gpu_and_energy_columns_are_empty(tmp_path):
    cols = sample(Backend.for_device(torch.device("cpu")), powercap_root=tmp_path / "absent")
    assert cols["cpu_util_pct_mean"] is not None
    assert cols.get("energy_j") is None and cols.get("power_w_mean") is None
    assert "gpu columns empty: device is cpu" in cols["telemetry_note"]
    assert "energy empty: no RAPL package zone" in cols["telemetry_note"]


# -- RAPL ----------------------------------------------------------------------------------

def make_powercap(root, packages):
    """packages: [(energy_uj, max_energy_range_uj)]; plus a sub-zone that must be ignored."""
    for i, (energy, span) in enumerate(packages):
        zone = root / f"intel-rapl:{i}"
        zone.mkdir(parents=True)
        (zone / "name").write_text(f"package-{i}\n")
        (zone / "energy_uj").write_text(f"{energy}\n")
        (zone / "max_energy_range_uj").write_text(f"{span}\n")
        sub = root / f"intel-rapl:{i}:0"
        sub.mkdir()
        (sub / "energy_uj").write_text("999999999\n")
        (sub / "max_energy_range_uj").write_text(f"{span}\n")
    return root


def set_energy(root, i, value):
    (root / f"intel-rapl:{i}" / "energy_uj").write_text(f"{value}\n")


def test_rapl_sums_packages_and_counts_a_wrap(tmp_path):
    root = make_powercap(tmp_path, [(990_000_000, 1_000_000_000), (5_000_000, 1_000_000_000)])
    counter, reason = rapl.RaplCounter.open(root)
    assert reason is None and [z.name for z in counter.zones] == ["intel-rapl:0", "intel-rapl:1"]
    counter.sample(0.0)
    set_energy(root, 0, 3_000_000)   # wrapped: 10 J to the top, then 3 J
    set_energy(root, 1, 7_000_000)   # +2 J
    counter.sample(1.0)
    assert counter.energy_j == pytest.approx(15.0)
    assert counter.power_w_max == pytest.approx(15.0)


def test_rapl_energy_through_the_sampler(tmp_path):
    root = make_powercap(tmp_path, [(1_000_000, 262_143_328_850)])
    with telemetry.Sampler(Backend.for_device(torch.device("cpu")), interval_s=0.02, powercap_root=root) as s:
        time.sleep(0.05)
        set_energy(root, 0, 6_000_000)  # 5 J during the window
        time.sleep(0.05)
    cols = s.columns()
    assert cols["energy_method"] == "rapl" and cols["energy_j"] == pytest.approx(5.0)
    assert cols["power_w_mean"] > 0 and cols["power_w_max"] >= cols["power_w_mean"]
    assert "RAPL package energy" in cols["telemetry_note"]


def test_unreadable_rapl_is_a_reason_not_a_failure(tmp_path):
    zone = tmp_path / "intel-rapl:0"
    (zone / "energy_uj").mkdir(parents=True)  # reading it raises IsADirectoryError
    (zone / "max_energy_range_uj").write_text("100\n")
    counter, reason = rapl.RaplCounter.open(tmp_path)
    assert counter is None and reason.startswith("RAPL unreadable")


def test_sampler_thread_is_cheap_and_stops():
    with telemetry.Sampler(Backend.for_device(torch.device("cpu")), interval_s=0.01) as s:
        deadline = time.monotonic() + 60  # readings, not seconds: a loaded host may schedule the thread late
        while s.ticks < 10 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert s.ticks >= 10 and not s._thread.is_alive()
    assert s.thread_cpu_s / s.ticks < 0.0025  # CPU time per reading of two /proc files (~0.1 ms idle)


def test_combine_ranks_keeps_per_device_meaning():
    ranks = [{"energy_j": 10.0, "power_w_mean": 100.0, "power_w_max": 120.0, "sm_clock_mhz_min": 1300,
              "energy_method": "nvml-counter", "throttle_reasons": "sw_power_cap", "telemetry_note": "a; b"},
             {"energy_j": 20.0, "power_w_mean": 200.0, "power_w_max": 250.0, "sm_clock_mhz_min": 1200,
              "energy_method": "nvml-counter", "throttle_reasons": "hw_slowdown", "telemetry_note": "b"}]
    ranks[0]["window_peak_rss_bytes"], ranks[1]["window_peak_rss_bytes"] = 3 * 2**30, 2 * 2**30
    ranks[0]["power_method"], ranks[1]["power_method"] = "energy-counter", "nvml-instant"
    out = telemetry.combine_ranks(ranks)
    assert out["energy_j"] == 15.0 and out["power_w_max"] == 250.0 and out["sm_clock_mhz_min"] == 1200
    assert out["window_peak_rss_bytes"] == 3 * 2**30  # the largest process, as peak memory is taken
    assert out["power_method"] == "nvml-instant"      # the weakest method any rank used
    assert out["throttle_reasons"] == "sw_power_cap;hw_slowdown" and out["telemetry_note"] == "a; b"


def test_a_serving_engines_processes_on_the_device_are_the_work_not_others(monkeypatch, cuda_device):
    # mode serve: the client holds no context; the engine it started (pid 4242) does, and 4343 is another's
    device = gpu(UUID_A, "00000000:3B:00.0", pids=[4242, 4343])
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml([device]))
    flags = sample(cuda_device(UUID_A), also_ours=lambda: {4242})["noise_flags"]
    assert device_flags(flags) == "other-processes-on-device(pid 4343)"
