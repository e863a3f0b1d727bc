"""``python -m trainer.lm [--flags]``: ``trainer.lm.run``'s trainer as a process."""

from trainer import cli, startup, stop_signal

if __name__ == "__main__":
    # First of all: as PID 1 a SIGTERM during the seconds the imports below take would be lost.
    stop_signal.catch_sigterm()
    from trainer.lm.flags import define_flags, options_from_flags

    # The flags before the frameworks: --help and a bad flag answer without importing torch.
    PARSED = cli.parse_early(define_flags)
    OPTIONS = options_from_flags()
    if isinstance(OPTIONS, int):
        cli.exit_process(OPTIONS)
    import trainer.xla  # noqa: F401  (first of ours, at a fixed point: trainer.startup)
    from trainer.lm.run import run

    startup.freeze_imports()
    cli.exit_process(cli.run_parsed(lambda config, paths: run(config, OPTIONS, paths=paths),
                                    PARSED))
