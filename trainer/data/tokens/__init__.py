"""Token shards for language models: what ``python -m trainer.data.make_token_shards`` writes
and ``python -m trainer.lm`` reads.

A shard folder (local or ``gs://``) holds ``train-NNNNNN.bin`` and ``val-NNNNNN.bin``, one of
each per input file: the documents' tokens as little-endian unsigned integers, 16-bit, or
32-bit for a vocabulary above 65,536 (the index's ``dtype``), each document followed by the
end-of-sequence token; ``NAME.json`` beside each records its token count, SHA-256 and source;
``index.json``, written last, lists them with the vocabulary and the tokenizer that made them
(``shards``). A run maps each shard of a split from a local file (a ``gs://`` one downloaded
first), each checked against its digest, and cuts the split into windows of ``--seq_len`` + 1
tokens (``windows``).
"""
