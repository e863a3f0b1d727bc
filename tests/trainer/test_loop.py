"""trainer.loop.StepClock: throughput from accumulated step times, compile steps and the time
between epochs left out."""

from trainer import loop


def test_step_clock_counts_steady_steps_and_skips_time_between_epochs(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(loop.time, "perf_counter", lambda: now[0])
    clock = loop.StepClock(skip=2)

    def advance(seconds):
        now[0] += seconds

    clock.start()
    for seconds in (5.0, 3.0, 1.0, 1.0):  # two slow (compiling) steps, then steady ones
        advance(seconds)
        clock.tick()
    advance(1.0)
    clock.stop()  # the last step finishes
    advance(100.0)  # evaluation and checkpoints: not training time
    clock.start()
    advance(1.0)
    clock.tick()
    advance(1.0)
    clock.stop()
    assert (clock.steps, clock.seconds) == (5, 13.0)
    assert (clock.steady_steps, clock.steady_seconds) == (3, 5.0)
    assert clock.rate(10) == 6.0 and clock.rate(10, steady=False) == 50 / 13.0
