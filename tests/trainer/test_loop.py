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


def test_step_clock_counts_the_time_waited_for_batches_as_part_of_training(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(loop.time, "perf_counter", lambda: now[0])
    clock = loop.StepClock(skip=0)

    def batches():
        for wait in (2.0, 0.5):
            now[0] += wait  # the loader takes this long to hand the batch over
            yield wait
        now[0] += 0.25  # and this long to say there is no more

    clock.start()
    loaded = batches()
    while clock.next_batch(loaded) is not None:
        now[0] += 1.0  # the step
        clock.tick()
    clock.stop()
    assert clock.waited == 2.75 and clock.seconds == 4.75
