"""The live progress panel follows a run's events: iteration, in flight, best vs baseline and goals, spend; off a
terminal it logs a line per event as it happens."""
from __future__ import annotations

import io

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


def test_off_a_terminal_each_event_is_a_line_when_it_happens():
    target = small_target(budget={"iterations": 2})
    log = io.StringIO()
    progress = LiveProgress(target, out=Console(file=log, force_terminal=False, width=120))
    lines_after_iteration_1 = []

    def snapshot(event):
        if event.kind == "iteration_started" and event.iteration == 2:
            lines_after_iteration_1.extend(log.getvalue().splitlines())

    with fake_swarm(target, [FakeAgent("a", {(1, 0): 1.5, (2, 1): "bad_edit"})],
                    listeners=[progress, snapshot]) as swarm, progress:
        swarm.start()
    text = log.getvalue()
    # written while the run went on, not drawn once at exit
    assert any("kept fake-cpu-001.i001.s00: 1.500x the baseline" in line for line in lines_after_iteration_1), text
    for expected in ("started fake-cpu-001", "iteration 2: 2 candidates on fake-cpu-001.i001.s00", "rejected:",
                     "stopped: iteration budget spent"):
        assert expected in text, text
    assert "┏" not in text and "in flight" not in text  # no panel
    lines = [line.split("] ", 1)[1] for line in text.splitlines() if line.startswith("[")]
    assert len(lines) == len(set(lines))
