"""The parent's profile in what agents see: a kept parent's own (from the PASS verdict that kept it), the run's
baseline's from the first verdict measured against it, rendered short enough for the prompt, and as data; and
the acceptance criteria still unmet, as text and as the fields the offline proposer's priors weigh."""
from __future__ import annotations

from loop_helpers import fake_swarm, small_target
from swarm_fakes import FakeAgent

from evaluator.verdict import PROFILE_ROWS, Profile, ProfileRow
from knowledge_base import REFERENCE_ID
from knowledge_base.hardware import LAUNCH_COSTS
from swarm.agents.prompt import proposal_prompt
from swarm.context import describe_profile

HEADING = "Where the parent's time goes per frame"


def _contexts(plan):
    agent = FakeAgent("a", plan)
    with fake_swarm(small_target(), [agent]) as swarm:
        swarm.start()
    return [next(c for c in agent.contexts if c.iteration == i and c.slot == 0) for i in (1, 2)]


def test_a_kept_parent_is_shown_with_its_own_profile():
    first, second = _contexts({(1, 0): 1.5})
    assert HEADING not in first.parent_figures  # nothing measured yet
    assert second.parent_id != REFERENCE_ID
    assert "fake::speed_1.5_op" in second.parent_figures and "fake::speed_1_op" not in second.parent_figures
    assert HEADING in proposal_prompt(second) and "fake::speed_1.5_op" in proposal_prompt(second)
    # and as data, for the offline proposer's retune order
    assert first.parent_kernels == {} and "fake::speed_1.5_op" in second.parent_kernels
    assert all(ms > 0 for ms in second.parent_kernels.values())


def test_the_baseline_parent_is_shown_with_the_profile_measured_against_it():
    _, second = _contexts({})  # nothing faster: iteration 2 forks from the reference again
    assert second.parent_id == REFERENCE_ID
    assert "fake::speed_1_op" in second.parent_figures
    assert second.parent_figures.splitlines()[1].startswith(HEADING)


def test_a_full_profile_stays_within_the_prompt_budget():
    rows = [ProfileRow(name="k" * 100, ms_per_frame=1.0 / (i + 1), calls_per_frame=2.0) for i in range(PROFILE_ROWS)]
    text = describe_profile(Profile(source="cuda", frames=8, rows=rows, total_ms_per_frame=9.0,
                                    total_calls_per_frame=40.0))
    assert len(text.splitlines()) <= 14 and "CUDA kernels" in text and "9.000 ms" in text


def test_a_measured_launch_cost_turns_the_kernel_count_into_time():
    """On a GPU kind whose launch cost is measured, agents read the parent's launches as milliseconds; elsewhere,
    and for CPU ops, the profile says nothing of launches."""
    rows = [ProfileRow(name="k", ms_per_frame=1.0, calls_per_frame=400.0)]
    cuda = Profile(source="cuda", frames=8, rows=rows, total_ms_per_frame=3.0, total_calls_per_frame=400.0)
    cost = LAUNCH_COSTS["h200"]
    line = describe_profile(cuda, "h200").splitlines()[-1]
    assert f"~{400 * cost.fixed_us / 1e3:.2f} ms of its 3.00 ms" in line and "400 launches" in line
    assert "launches" not in describe_profile(cuda, "b200") and "launches" not in describe_profile(cuda)
    cpu = Profile(source="cpu", frames=8, rows=rows, total_ms_per_frame=3.0, total_calls_per_frame=400.0)
    assert "launches" not in describe_profile(cpu, "h200")


def test_agents_see_the_unmet_criteria_as_text_and_as_aims():
    agent = FakeAgent("a", {})
    with fake_swarm(small_target(acceptance={"speedup": 5.0, "ttfa_ms": 0.001}), [agent]) as swarm:
        swarm.start()
    context = agent.contexts[0]
    assert context.unmet_aims == ["ttfa_ms", "speedup"]
    assert "TTFA p50 ms <= 0.001" in context.acceptance and "first audio" in context.acceptance
