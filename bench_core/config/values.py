"""How a configuration value given as text or a number (CLI flags, YAML, notebook parameters) is
read into its field's type, or refused with a one-line ConfigError naming the field.
"""
from __future__ import annotations

from typing import Any

from bench_core.errors import ConfigError


# The largest whole number a field takes unless it says otherwise: a count of steps or a tensor's side beyond
# it is no benchmark (and past 2**63 torch cannot even take it: an overflow after the run has started).
MAX_WHOLE = 2**31 - 1


def as_int(name: str, value: Any, minimum: int | None = None, optional: bool = False,
           maximum: int = MAX_WHOLE) -> int | None:
    if optional and (value is None or value == "" or value == "none"):
        return None
    if isinstance(value, bool):
        raise ConfigError(name, f"must be a whole number, got {value!r}")
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ConfigError(name, f"must be a whole number, got {value!r}") from None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        raise ConfigError(name, f"must be a whole number, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(name, f"must be >= {minimum}, got {value}")
    if value > maximum:
        raise ConfigError(name, f"must be <= {maximum:,}, got {value:.4g}" if value > 10**15 else
                          f"must be <= {maximum:,}, got {value:,}")
    return value


def as_float(name: str, value: Any, minimum: float = 0.0, optional: bool = False,
             maximum: float | None = None) -> float | None:
    if optional and (value is None or value == "" or value == "none"):
        return None
    if isinstance(value, bool):
        raise ConfigError(name, f"must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(name, f"must be a number, got {value!r}") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ConfigError(name, f"must be a finite number, got {value!r}")
    if number < minimum:
        raise ConfigError(name, f"must be >= {minimum:g}, got {value!r}")
    if maximum is not None and number > maximum:
        raise ConfigError(name, f"must be <= {maximum:g}, got {number:g}")
    return number


TRUE_WORDS = {"true", "yes", "1", "on"}
FALSE_WORDS = {"false", "no", "0", "off"}


def as_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in TRUE_WORDS | FALSE_WORDS:
        return value.strip().lower() in TRUE_WORDS
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ConfigError(name, f"must be true or false, got {value!r}")


def as_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value.strip().lower() not in choices:
        raise ConfigError(name, f"got {value!r}; allowed: {', '.join(choices)}")
    return value.strip().lower()


def as_str(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(name, f"must be text, got {value!r}")
    if any(ch in value for ch in "\n\r\x00"):
        raise ConfigError(name, "must be a single line of text")
    return value.strip()


def as_currency(value: Any, price: float | None) -> str | None:
    """The currency a price is in, as a short word of letters (USD, EUR, CHF), upper case; only with a price."""
    if value is None or str(value).strip() == "":
        return None
    text = str(value).strip().upper()
    if not (text.isalpha() and 1 <= len(text) <= 5):
        raise ConfigError("currency", f"must be a currency code of letters, such as USD or EUR, got {value!r}")
    if price is None:
        raise ConfigError("currency", f"{text} is the currency of price_per_hour, which is not given")
    return text


def check_int(name: str, value, minimum: int) -> int:
    """A whole-number setting of a command (not a BenchConfig field), checked like the fields."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(name, f"must be a whole number >= {minimum}, got {value!r}")
    return value
