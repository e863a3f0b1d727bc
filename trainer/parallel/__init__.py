"""How the job's devices share the model: the mesh of ``--sharding`` and ``--mesh``
(``mesh``), and which dimension of each parameter FSDP shards, with what that leaves on each
device (``fsdp``). Neither imports torch_xla: ``trainer.xla`` applies what they decide."""
