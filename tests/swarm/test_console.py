"""The live progress panel follows a run's events: iteration, in flight, best vs baseline and goals, spend."""
from __future__ import annotations

from loop_helpers import fake_swarm, small_target
from rich.console import Console
from swarm_fakes import FakeAgent

from swarm.console import LiveProgress


def test_live_progress_tracks_the_run():
    target = small_target(acceptance={"frames_per_s": 400}, budget={"iterations": 2, "dollars": 5})
    progress = LiveProgress(target)
    with fake_swarm(target, [FakeAgent("a", {(1, 0): 1.5, (2, 1): "bad_edit"}, cost_usd=0.25)],
                    listeners=[progress]) as swarm, progress:
        swarm.start()
    assert progress.iteration == 2 and progress.evaluated == 3 and not progress.in_flight
    assert progress.best is not None and progress.spend.dollars == 1.0
    screen = Console(width=200, record=True)
    screen.print(progress.render())
    text = screen.export_text()
    for expected in ("iteration  2/2", "1.500x baseline", "150.0 (goal >= 400)", "$1.00/5", "rejected",
                     "stopped: iteration budget spent"):
        assert expected in text, text
