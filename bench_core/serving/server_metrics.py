"""The server's own Prometheus metrics, read while a point runs: how many requests waited in its
queue and how full its KV cache was, the two figures that say why latency rose.

Engines that expose /metrics (vLLM; SGLang with --enable-metrics; TGI) are scraped every
SCRAPE_S during the point and once after it; the text format is parsed by prometheus_client's parser
(not by hand). The prefix cache's hit rate over the point is the growth of the engine's hit counter
over the growth of its query counter between the first and the last scrape (vLLM's
prefix_cache_hits / prefix_cache_queries, in tokens), or the mean of a hit-rate gauge (SGLang's
cache_hit_rate).
Each engine names its gauges differently: QUEUE and KV_CACHE list the names known here, the
first present is used. Engines without metrics (transformers serve) leave the columns empty.
"""
from __future__ import annotations

import asyncio

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

SCRAPE_S = 0.5
QUEUE = ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size")
RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size")
KV_CACHE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")
PREFIX_HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
PREFIX_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
HIT_RATE = ("sglang:cache_hit_rate",)


def gauges(text: str) -> dict[str, float]:
    """Every sample of a Prometheus text page, summed over its labels (one server, many engines' names)."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + float(sample.value)
    return values


def pick(values: dict[str, float], names: tuple[str, ...]) -> float | None:
    return next((values[n] for n in names if n in values), None)


class Scraper:
    """Scrape `url` every SCRAPE_S until stopped; keep the largest queue, running and KV-cache figures."""

    def __init__(self, url: str):
        self.url = url
        self.peaks: dict[str, float] = {}
        self.error = ""
        self.counters: list[tuple[float, float]] = []  # (prefix-cache hits, queries) at each scrape
        self.hit_rates: list[float] = []

    def take(self, text: str) -> None:
        values = gauges(text)
        hits, queries, rate = pick(values, PREFIX_HITS), pick(values, PREFIX_QUERIES), pick(values, HIT_RATE)
        if hits is not None and queries is not None:
            self.counters.append((hits, queries))
        if rate is not None:
            self.hit_rates.append(rate)
        for column, names in (("server_queue_max", QUEUE), ("server_running_max", RUNNING),
                              ("server_kv_cache_max", KV_CACHE)):
            value = pick(values, names)
            if value is not None:
                self.peaks[column] = max(value, self.peaks.get(column, value))

    def figures(self) -> dict:
        """The row's columns: the peaks, and the prefix cache's hit rate over the point where known."""
        out = dict(self.peaks)
        if len(self.counters) >= 2 and self.counters[-1][1] > self.counters[0][1]:
            (hits0, queries0), (hits1, queries1) = self.counters[0], self.counters[-1]
            out["prefix_cache_hit_rate"] = (hits1 - hits0) / (queries1 - queries0)
        elif self.hit_rates:
            out["prefix_cache_hit_rate"] = sum(self.hit_rates) / len(self.hit_rates)
        return out

    async def scrape(self, client: aiohttp.ClientSession) -> None:
        try:
            async with client.get(self.url, timeout=aiohttp.ClientTimeout(total=5.0)) as response:
                if response.status == 200:
                    self.take(await response.text())
                else:
                    self.error = f"HTTP {response.status}"
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            self.error = type(exc).__name__

    async def run(self, client: aiohttp.ClientSession) -> None:
        while True:
            await self.scrape(client)
            await asyncio.sleep(SCRAPE_S)
