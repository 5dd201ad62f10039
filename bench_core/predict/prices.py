"""What one GPU costs for an hour: the on-demand prices shipped in bench_core/data/gpu_prices.csv (one
provider per GPU, with the day it was read and its source page) and the prices a user gives
(`--price NAME=PRICE`, a sweep file's `price`), which win. Prices change: each one says where it is from.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from bench_core.errors import ConfigError
from bench_core.predict.specs import data_rows, gpu_list, spec, specs

GIVEN = "given"  # the provider of a price the user gave
DEFAULT_CURRENCY = "USD"  # of a given price that names none (the shipped prices are in USD)


@dataclass(frozen=True)
class Price:
    price_per_hour: float        # per GPU-hour, on demand
    currency: str
    provider: str                # GIVEN for a price the user gave
    date: str                    # the day it was read from the provider's page ("" for a given price)
    source: str

    def text(self) -> str:
        """'3.49 USD per GPU-hour (RunPod (Secure Cloud), 2026-09-25)', or '(given)'."""
        where = f"{self.provider}, {self.date}" if self.date else self.provider
        return f"{self.price_per_hour:g} {self.currency} per GPU-hour ({where})"


@functools.cache
def shipped_prices() -> dict[str, Price]:
    """GPU short name -> its price in gpu_prices.csv."""
    return {r["gpu"]: Price(float(r["price_per_hour"]), r["currency"], r["provider"], r["date"], r["source"])
            for r in data_rows("gpu_prices.csv")}


def gpu_price(name: str) -> Price | None:
    """The shipped on-demand price of a GPU by its short name (case-insensitive, as `bench predict --gpu`
    takes it), or None where none is sourced: price_per_hour, currency, provider, date and source."""
    wanted = str(name or "").strip().lower()
    return next((p for gpu, p in shipped_prices().items() if gpu.lower() == wanted), None)


def parse_prices(items: list[str] | dict | None, field_name: str = "price") -> dict[str, Price]:
    """Prices the user gives, as `NAME=PRICE` or `NAME=PRICE:CURRENCY` (a list of them), or a mapping
    {NAME: PRICE} (a sweep file); NAME a GPU of gpu_peaks.csv. Bad input names the field and exits 2."""
    if isinstance(items, str):
        items = [items]
    if not isinstance(items, (dict, list, tuple, type(None))) or (
            not isinstance(items, dict) and not all(isinstance(item, str) for item in items or [])):
        raise ConfigError(field_name, f"must be NAME=PRICE per GPU-hour (a mapping of GPU names to prices in a "
                                      f"sweep file), got {items!r}")
    pairs = list(items.items()) if isinstance(items, dict) else [split(item, field_name) for item in items or []]
    names = {s.gpu.lower(): s.gpu for s in specs()}
    out = {}
    for name, value in pairs:
        gpu = names.get(str(name).strip().lower()) or spec(str(name), field_name).gpu  # (unknown: spec() refuses it)
        amount, _, currency = str(value).partition(":")
        try:
            price = float(amount)
        except ValueError:
            price = math.nan
        if not (math.isfinite(price) and price > 0):
            raise ConfigError(field_name, f"{gpu}'s price must be a positive number per GPU-hour, got {value!r}")
        currency = currency.strip().upper() or DEFAULT_CURRENCY
        if not (currency.isalpha() and len(currency) <= 5):
            raise ConfigError(field_name, f"{gpu}'s currency must be letters such as USD or EUR, got {currency!r}")
        out[gpu] = Price(price, currency, GIVEN, "", f"given ({field_name} {gpu}={value})")
    return out


def split(item: str, field_name: str) -> tuple[str, str]:
    name, sep, value = str(item).partition("=")
    if not sep or not name.strip() or not value.strip():
        raise ConfigError(field_name, f"must be NAME=PRICE per GPU-hour (e.g. H100-SXM5-80GB=2.99, or "
                                      f"H100-SXM5-80GB=2.75:EUR), got {item!r}")
    return name, value.strip()


def price_texts(given: dict[str, Price]) -> list[str]:
    """Given prices as parse_prices() reads them back (NAME=PRICE:CURRENCY): how a report's notebook gets them."""
    return [f"{gpu}={p.price_per_hour:g}:{p.currency}" for gpu, p in given.items()]


def report_choices(predict_gpus=None, prices=None) -> tuple[list[str], list[str]]:
    """The GPUs a report predicts and their prices as a sweep file (predict_gpus, price) or `bench report`
    gives them, checked (exit 2 naming the field) and put as build_report takes them; nothing given: []."""
    gpus = list(gpu_list(predict_gpus)) if predict_gpus not in (None, "", []) else []
    return gpus, price_texts(parse_prices(prices, "price"))


def prices_with(given: dict[str, Price] | None = None) -> dict[str, Price]:
    """The shipped prices, with the given ones in their place."""
    return {**shipped_prices(), **(given or {})}


def cost_per_million(price: Price | None, devices: int, items_per_s: float | None) -> float | None:
    """The price of a million items (images, tokens: the throughput's unit) at `items_per_s` on `devices`
    GPUs, None without a price or a throughput."""
    return None if price is None else per_million(price.price_per_hour, devices, items_per_s)


def per_million(price_per_hour: float, devices, items_per_s) -> float | None:
    """price_per_hour x devices / (items_per_s x 3600) x 1e6, as bench_core/measure/efficiency.py writes a row's
    cost_per_million; None without a positive throughput (devices missing: one)."""
    if not items_per_s or items_per_s != items_per_s or items_per_s <= 0:
        return None
    devices = 1 if devices is None or devices != devices else devices
    return price_per_hour * devices / (items_per_s * 3600) * 1e6
