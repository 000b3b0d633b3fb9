"""Dollar prices of LLM calls: a per-model table (USD per million tokens) and the cost of one call.

Models are matched by the longest table key that prefixes the model name, so dated ids
("claude-sonnet-4-5-20250929") price like their family. A known model is priced wherever it is served;
an unknown one costs 0: silently on a custom base_url (a self-hosted vLLM / llama.cpp / ollama model),
with a warning on a provider's own API.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Price:
    input_per_mtok: float
    output_per_mtok: float


# List prices (USD / 1M tokens); update here when providers change them.
PRICES: dict[str, Price] = {
    "claude-opus-4-5": Price(5.0, 25.0),
    "claude-opus-4": Price(15.0, 75.0),
    "claude-sonnet-4": Price(3.0, 15.0),
    "claude-3-7-sonnet": Price(3.0, 15.0),
    "claude-3-5-sonnet": Price(3.0, 15.0),
    "claude-haiku-4": Price(1.0, 5.0),
    "claude-3-5-haiku": Price(0.8, 4.0),
    "gpt-5-mini": Price(0.25, 2.0),
    "gpt-5-nano": Price(0.05, 0.4),
    "gpt-5": Price(1.25, 10.0),
    "gpt-4.1-mini": Price(0.4, 1.6),
    "gpt-4.1-nano": Price(0.1, 0.4),
    "gpt-4.1": Price(2.0, 8.0),
    "gpt-4o-mini": Price(0.15, 0.6),
    "gpt-4o": Price(2.5, 10.0),
    "o4-mini": Price(1.1, 4.4),
    "o3-mini": Price(1.1, 4.4),
    "o3": Price(2.0, 8.0),
}
FREE = Price(0.0, 0.0)
_warned: set[str] = set()


def price_of(model: str, *, custom_endpoint: bool = False) -> Price:
    """The model's price, or FREE for an unknown model (warned once per model unless self-hosted)."""
    keys = [k for k in PRICES if model.startswith(k)]
    if keys:
        return PRICES[max(keys, key=len)]
    if not custom_endpoint and model not in _warned:
        _warned.add(model)
        log.warning("no price known for model %r: its calls are counted as $0; add it to swarm/agents/pricing.py "
                    "so the dollar cap applies", model)
    return FREE


def cost_usd(price: Price, input_tokens: int, output_tokens: int) -> float:
    return (input_tokens * price.input_per_mtok + output_tokens * price.output_per_mtok) / 1e6
