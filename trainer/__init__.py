"""Trainers run by the launcher on every XLA device of the job, as one SPMD program:
``trainer.mnist``, ``trainer.imagenet``; and ``trainer.train``, their run for your own model
and data (``trainer.own_loop``)."""


def train(model, train_set, eval_set=None, loss_fn=None, argv=None):
    """Train ``model`` on ``train_set`` (evaluating on ``eval_set``) with the trainers' run,
    configured by the flags in ``argv`` (default ``sys.argv[1:]``); returns the summary, or
    ends the process with the trainers' exit code and one line. Call it once, as the
    script's main: ``trainer.own_loop`` says what it takes and does."""
    from trainer import stop_signal

    # First: from here on a SIGTERM checkpoints (or ends a run with nothing to save) instead
    # of killing the process while the imports below take seconds.
    stop_signal.catch_sigterm()
    from trainer.own_loop import train as train_own

    return train_own(model, train_set, eval_set, loss_fn, argv)
