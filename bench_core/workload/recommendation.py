"""The recommendation family: DLRM-shaped click-through models (MLPerf's DLRM and DLRM-DCNv2
shapes, written in bench_core/workload/dlrm.py: torchrec would need fbgemm-gpu) on synthetic
Criteo-like batches: 13 dense features and, for each of num_tables tables, indices_per_lookup
indices summed in one embedding bag.

Embedding lookups are bound by memory, not FLOPs: the tables (num_tables x rows_per_table x
embedding_dim) are sized to be much larger than any cache, the indices follow a power law (uniform
indices would flatter caches), and a row carries the tables' bytes and the bytes its lookups move
per second; MFU is left empty, with the reason. A sample is one (dense, sparse) example: samples/s.

Plain data at import; torch is imported where a batch or a model is made (see family.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from bench_core.errors import ConfigError
from bench_core.workload.family import ModelSpec, Task, Workload, random_tensor, seeded_generator
from bench_core.workload.precision import resolve_precision

DENSE_FEATURES = 13         # Criteo's integer features
ROWS_PER_TABLE = 500_000    # 26 tables x 128 x 4 bytes: 6.7 GB of fp32 tables, far beyond any cache
MAX_ROWS_PER_TABLE = 2**31  # rank x multiplier (both below it) stays inside int64: a 1 TiB table of 128 fp32
ZIPF_EXPONENT = 1.05
LEARNING_RATE = 1e-4
BYTES = {"float16": 2, "bfloat16": 2}  # a table's element size by its dtype; float32 otherwise


@dataclass(frozen=True)
class RecModel:
    """One DLRM shape as plain values (validation reads the defaults without importing torch)."""
    interaction: str                  # dot | dcn
    bottom: tuple[int, ...]           # bottom MLP widths before the last layer (which is embedding_dim wide)
    top: tuple[int, ...]              # top MLP widths before its one-logit output
    num_tables: int = 26
    embedding_dim: int = 128
    indices_per_lookup: int = 1
    cross_layers: int = 3             # dcn only
    cross_rank: int = 512             # dcn only

    def build(self, cfg):
        import torch

        # Torch code (nn.Module subclasses): imported only when a recommendation model is built.
        from bench_core.workload.dlrm import DLRM
        return DLRM(DENSE_FEATURES, cfg.num_tables, cfg.rows_per_table, cfg.embedding_dim, list(self.bottom),
                    list(self.top), self.interaction, self.cross_layers, self.cross_rank,
                    table_dtype=getattr(torch, table_dtype(cfg)))


def table_dtype(cfg) -> str:
    """The tables' dtype: a pure cast's, else float32 (autocast leaves embedding bags in float32)."""
    return resolve_precision(getattr(cfg, "precision", "fp32")).cast_dtype or "float32"


def table_bytes(cfg) -> int:
    return cfg.num_tables * cfg.rows_per_table * cfg.embedding_dim * BYTES.get(table_dtype(cfg), 4)


def lookup_bytes_per_sample(cfg) -> int:
    """Embedding bytes one sample moves, counted as FBGEMM's embedding benchmark counts them: a
    forward reads indices_per_lookup rows and writes one pooled row per table; training adds twice
    that for the backward (the update reads and writes the rows it looked up)."""
    forward = cfg.num_tables * cfg.embedding_dim * BYTES.get(table_dtype(cfg), 4) * (cfg.indices_per_lookup + 1)
    return 3 * forward if cfg.mode == "train" else forward


class RecommendationTask(Task):
    """Dense features, Zipf-skewed multi-hot indices per table and a random click label."""
    name = "recommendation"
    family = "recommendation"
    sample = "sample"
    unit = "samples/s"
    shape_fields = ("num_tables", "rows_per_table", "embedding_dim", "indices_per_lookup", "zipf_exponent")
    description = "a recommendation model (DLRM)"
    mfu_note = ("not applicable: embedding lookups are bound by memory and have almost no FLOPs, so an MFU of "
                "the MLPs' FLOPs says nothing about the device; embedding_bytes_per_s is its rate")

    def check(self, spec: ModelSpec, cfg) -> None:
        model = spec.builder
        cfg.num_tables = cfg.num_tables or model.num_tables
        cfg.rows_per_table = cfg.rows_per_table or ROWS_PER_TABLE
        cfg.embedding_dim = cfg.embedding_dim or model.embedding_dim
        cfg.indices_per_lookup = cfg.indices_per_lookup or model.indices_per_lookup
        cfg.zipf_exponent = ZIPF_EXPONENT if cfg.zipf_exponent is None else cfg.zipf_exponent
        super().check(spec, cfg)
        if cfg.rows_per_table > MAX_ROWS_PER_TABLE:
            raise ConfigError("rows_per_table", f"must be <= {MAX_ROWS_PER_TABLE} (2^31), got {cfg.rows_per_table}")
        if cfg.channels_last:
            raise ConfigError("channels_last", f"applies to image models only; {spec.name} is {self.description}")
        if cfg.mode == "train" and getattr(cfg, "optimizer", "sgd") != "sgd":
            raise ConfigError("optimizer", f"{cfg.optimizer} takes no sparse gradients (torch's Adam and AdamW refuse "
                                           f"them) and {spec.name}'s tables have sparse ones; allowed: sgd (plain SGD, "
                                           "as the DLRM reference trains)")
        if getattr(cfg, "nproc_per_node", 1) * getattr(cfg, "nnodes", 1) > 1:
            raise ConfigError("nproc_per_node", f"{spec.name} runs on one device: spread over several, its tables "
                                                "would be sharded (model parallel, as torchrec does), not replicated "
                                                "by DDP; allowed: 1")

    def build(self, spec: ModelSpec, cfg):
        return spec.builder.build(cfg)

    def default_input(self, spec: ModelSpec) -> str:
        m = spec.builder
        return f"{m.num_tables} x {ROWS_PER_TABLE:,} x {m.embedding_dim}, {m.indices_per_lookup}/lookup"

    def sample_shape(self, cfg) -> str:
        return (f"{DENSE_FEATURES} dense + {cfg.num_tables} tables x {cfg.indices_per_lookup} of {cfg.rows_per_table} "
                f"rows x {cfg.embedding_dim}, zipf {cfg.zipf_exponent:g}")

    def input_text(self, cfg) -> str:
        return f"{cfg.num_tables}x{cfg.rows_per_table}x{cfg.embedding_dim}, {cfg.indices_per_lookup}/lookup"

    def throughput_columns(self, cfg, samples_per_s: float) -> dict:
        return {"embedding_bytes_per_s": samples_per_s * lookup_bytes_per_sample(cfg)}

    def config_facts(self, cfg) -> dict:
        return {"embedding_table_bytes": table_bytes(cfg)}

    def memory_needed(self, cfg) -> tuple[int, str]:
        return table_bytes(cfg), (f"embedding tables ({cfg.num_tables} x {cfg.rows_per_table:,} rows x "
                                  f"{cfg.embedding_dim} x {BYTES.get(table_dtype(cfg), 4)} bytes)")

    def make_workload(self, spec: ModelSpec, cfg, device, dtype, rank: int = 0) -> Workload:
        import torch
        import torch.nn.functional as F
        generator = seeded_generator(device, cfg.seed + rank)
        dense = random_tensor((cfg.batch_size, DENSE_FEATURES), device, dtype, generator)
        clicks = torch.randint(0, 2, (cfg.batch_size,), device=device, generator=generator).float()
        indices = zipf_indices(cfg.num_tables, cfg.batch_size, cfg.indices_per_lookup, cfg.rows_per_table,
                               cfg.zipf_exponent, seed=cfg.seed + rank).to(device)

        def plain_sgd(model):
            # No momentum: a momentum buffer of a sparse gradient is a sparse tensor that grows with every
            # row ever touched. Plain SGD updates only the rows the batch looked up (the DLRM reference's).
            return torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=LEARNING_RATE)
        return Workload((dense, indices), lambda logits: F.binary_cross_entropy_with_logits(logits.float(), clicks),
                        lambda m: m(dense, indices), lambda m: m(dense, indices), make_optimizer=plain_sgd)


def zipf_indices(tables: int, batch: int, per_lookup: int, rows: int, exponent: float, seed: int):
    """(tables, batch, per_lookup) row indices whose popularity follows a power law: rank k (0 the
    most popular) is drawn with probability proportional to the integral of x^-exponent from k+1 to
    k+2 (a continuous Zipf; exponent 0 is uniform), then mapped one-to-one onto the table's rows by
    row = (rank x multiplier + offset) mod rows, so that popular rows lie scattered over the table, not
    packed at its start where they would share cache lines and pages. Drawn once in float64 on the
    CPU (MPS has no float64), the same indices on every device for a seed, and moved to the device
    before the warm-up."""
    import torch
    generator = torch.Generator().manual_seed(seed)
    u = torch.rand((tables, batch, per_lookup), dtype=torch.float64, generator=generator)
    n = float(rows)
    if exponent == 1.0:
        x = torch.exp(u * torch.log1p(torch.tensor(n, dtype=torch.float64)))
    else:
        a = 1.0 - exponent
        x = (((n + 1.0) ** a - 1.0) * u + 1.0) ** (1.0 / a)
    ranks = (torch.floor(x) - 1).clamp(0, rows - 1).long()
    offsets = torch.randint(0, rows, (tables, 1, 1), generator=generator)  # each table's hot rows elsewhere
    return (ranks * scatter_multiplier(rows) + offsets) % rows


def scatter_multiplier(rows: int) -> int:
    """The integer nearest rows x 0.618... (the golden ratio's fraction: successive multiples spread
    evenly, Fibonacci hashing) that shares no factor with rows, so that rank -> rank x it mod rows is
    one-to-one and consecutive ranks land about 0.38 or 0.62 of the table apart."""
    multiplier = max(round(rows * (5 ** 0.5 - 1) / 2), 1)
    while math.gcd(multiplier, rows) != 1:
        multiplier += 1
    return multiplier


RECOMMENDATION = RecommendationTask()
TASKS = (RECOMMENDATION,)

# MLPerf's shapes: bottom MLP 13-512-256-128, top MLP 1024-1024-512-256-1, 26 tables of 128.
_BOTTOM, _TOP = (512, 256), (1024, 1024, 512, 256)
MODELS = (
    ModelSpec("dlrm", RECOMMENDATION, RecModel("dot", _BOTTOM, _TOP), source="bench_core",
              notes="MLPerf DLRM shapes, dot interaction; tables x rows x dim, indices per lookup"),
    ModelSpec("dlrm-dcnv2", RECOMMENDATION, RecModel("dcn", _BOTTOM, _TOP, indices_per_lookup=8),
              aliases=("dlrm_dcnv2",), source="bench_core",
              notes="MLPerf DLRM-DCNv2 shapes: 3 low-rank (512) cross layers, multi-hot (MLPerf's average 8.2)"),
)
