"""Trainers run by the launcher on every XLA device of the job, as one SPMD program:
``trainer.mnist``, ``trainer.imagenet``; and ``trainer.train``, their run for your own model
and data (``trainer.own_loop``)."""

from trainer import known_warnings

known_warnings.install()


def train(model, train_set, eval_set=None, loss_fn=None, argv=None, metrics=None,
          param_groups=None, collate_fn=None):
    """Train ``model`` on ``train_set`` (evaluating on ``eval_set``) with the trainers' run,
    configured by the flags in ``argv`` (default ``sys.argv[1:]``); returns the summary, or
    ends the process with the trainers' exit code and one line. Call it once, as the
    script's main: ``trainer.own_loop`` says what it takes and does."""
    import sys

    from trainer import cli, own_flags, stop_signal

    # First: from here on a SIGTERM checkpoints (or ends a run with nothing to save) instead
    # of killing the process while the imports below take seconds.
    stop_signal.catch_sigterm()
    program = sys.argv[0] if sys.argv and sys.argv[0] else "train"
    flags = list(sys.argv[1:] if argv is None else argv)
    # The flags before torch_xla: --help and a bad flag answer without importing it.
    config = cli.parse_main(own_flags.define_flags, [program] + flags,
                            fixed={"data_dir": own_flags.DATA_FROM})
    if isinstance(config, int):  # --help printed (0), or a usage error's one line
        cli.exit_process(config)
    from trainer.own_loop import train as train_own

    return train_own(config, model, train_set, eval_set, loss_fn, metrics, param_groups,
                     collate_fn)
