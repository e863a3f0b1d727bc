"""Container entrypoint: detect the XLA device for this job, configure torch_xla's runtime,
and exec the trainer. See ``launcher.cli`` for the command line and ``launcher.errors`` for
the exit codes."""
