"""CostLedger: reservations against the hard dollar cap, and what settled calls record."""
from __future__ import annotations

import pytest

from swarm.agents import BudgetExceeded, CostLedger
from swarm.agents.ledger import CallRecord
from swarm.agents.pricing import FREE, PRICES, cost_usd, price_of


def test_calls_in_flight_count_against_the_cap():
    ledger = CostLedger(cap_usd=1.0)
    with ledger.hold("a", 0.6):
        with pytest.raises(BudgetExceeded, match="in flight"), ledger.hold("b", 0.6):
            pass
        with ledger.hold("b", 0.4) as hold:
            hold.charge(CallRecord("b", "m", 10, 20, 0.3))
    assert ledger.spent_usd == pytest.approx(0.3) and (ledger.input_tokens, ledger.output_tokens) == (10, 20)
    with ledger.hold("c", 0.7):  # the first hold was released uncharged (a failed call costs nothing)
        pass


def test_no_cap_never_refuses_and_resumed_spend_counts():
    with CostLedger().hold("a", 1e9):
        pass
    with pytest.raises(BudgetExceeded), CostLedger(cap_usd=5.0, spent_usd=4.9).hold("a", 0.2):
        pass


def test_dated_model_ids_price_like_their_family():
    assert price_of("claude-sonnet-4-5-20250929") == PRICES["claude-sonnet-4"]
    assert price_of("claude-opus-4-5-20251101") == PRICES["claude-opus-4-5"]
    assert price_of("gpt-4o-mini-2024-07-18") == PRICES["gpt-4o-mini"]
    assert price_of("my-finetune", custom_endpoint=True) == FREE
    assert cost_usd(PRICES["gpt-4o"], 1_000_000, 100_000) == pytest.approx(2.5 + 1.0)
