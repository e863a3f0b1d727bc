"""A decoder-only language model trained next-token on token shards: ``python -m trainer.lm``
(``trainer.lm.run``; the model: ``trainer.lm.decoder``; the data:
``trainer.data.tokens``)."""
