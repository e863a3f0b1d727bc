"""``python -m trainer.lm``'s run (``trainer.lm.flags`` says what it does): the data as windows
of tokens (``trainer.data.tokens``), the model, and ``fit`` with a next-token loss, token
accuracy, perplexity, tokens/s and MFU."""

from __future__ import annotations

import logging
import shutil
from dataclasses import replace
from typing import Any, Dict, Optional, Tuple

import numpy
import torch
import torch.nn.functional as F

from trainer import devices, models, scratch, storage
from trainer.config import TrainConfig, parse_model_kwargs
from trainer.data.tokens.shards import (
    BYTES_EOS,
    BYTES_VOCABULARY,
    SPLITS,
    map_split,
    read_index,
    split_bytes,
    stream_split,
)
from trainer.data.tokens.windows import TokenWindows
from trainer.data.workers import resolve_workers
from trainer.dataset_source import DatasetSource
from trainer.errors import EX_USAGE, TrainerError
from trainer.fit import TrainSpec, fit
from trainer.lm.decoder import Decoder, flops_per_token, preset
from trainer.lm.flags import LmOptions
from trainer.outputs import OutputPaths

log = logging.getLogger("trainer")

# --fake_data: random tokens of the raw-bytes vocabulary, this many windows a split.
FAKE_WINDOWS = {"train": 4096, "val": 64}


def next_token_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The mean cross-entropy of each position's scores (``N x L x V``) against the next
    token (``N x L``); -100 ignored, as torch's."""
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100)


def token_data(config: TrainConfig, seq_len: int, cache_dir: str = "", reads: str = "auto"
               ) -> Tuple[Dict[str, TokenWindows], int, int]:
    """({split: its windows}, the vocabulary size, the end-of-document token) from
    ``--data_dir``'s shards, read as ``reads`` (``--token_reads``: ``how_to_read``) or
    ``--fake_data``."""
    if config.fake_data:
        generator = numpy.random.default_rng(config.seed)
        return {split: TokenWindows(generator.integers(
            0, BYTES_VOCABULARY, windows * seq_len + 1).astype(numpy.uint16), seq_len,
            split) for split, windows in FAKE_WINDOWS.items()}, BYTES_VOCABULARY, BYTES_EOS
    folder = storage.open_dir(config.data_dir)
    index = read_index(folder)
    if how_to_read(reads, folder, index, cache_dir) == "stream":
        sizes = folder.sizes()
        found = {split: stream_split(folder, index, split, sizes) for split in SPLITS}
    else:
        found = {split: map_split(folder, index, split, cache_dir) for split in SPLITS}
    windows = {"train": TokenWindows(found["train"], seq_len, folder.join("train-*.bin"))}
    held_out = sum(len(part) for part in found["val"])
    if held_out > seq_len:
        windows["val"] = TokenWindows(found["val"], seq_len, folder.join("val-*.bin"))
    else:
        log.warning("%s: its val split holds %d tokens, under one window: no evaluation",
                    folder.join(""), held_out)
    return windows, int(index["vocab_size"]), int(index["eos"])


def how_to_read(reads: str, folder: Any, index: Dict[str, Any], cache_dir: str) -> str:
    """"map" or "stream": ``--token_reads=stream`` streams; a local folder is otherwise mapped
    where it is; a ``gs://`` one is downloaded into ``cache_dir`` and mapped (``download``),
    or with ``auto`` where its shards take at most half the free space there, streamed where
    they take more (logged, with the sizes)."""
    if reads == "stream" or not cache_dir:
        return "stream" if reads == "stream" else "map"
    needed = split_bytes(index)
    free = shutil.disk_usage(cache_dir).free
    if reads == "download" or needed <= free // 2:
        log.info("%s: %.2f GB of token shards downloaded to %s (%.1f GB free there)",
                 folder.join(""), needed / 1e9, cache_dir, free / 1e9)
        return "map"
    log.info("%s: %.2f GB of token shards, over half of the %.1f GB free in %s: each window "
             "is read where it is (--token_reads=stream; --token_reads=download downloads "
             "them anyway)", folder.join(""), needed / 1e9, free / 1e9, cache_dir)
    return "stream"


def build_model(config: TrainConfig, options: LmOptions, vocab_size: int,
                eos: int = -1) -> torch.nn.Module:
    """``--model``'s callable, or the decoder of ``--preset`` and the size flags (attention
    kept within each document: ``eos``)."""
    extra = parse_model_kwargs(config.model_kwargs)
    if not config.model:
        if extra:
            raise TrainerError("--model_kwargs is for --model=PACKAGE.MODULE:CALLABLE",
                               "size the built-in decoder with --preset and --width, --layers "
                               "...", EX_USAGE)
        return Decoder(replace(preset(
            options.preset, vocab_size, options.seq_len, width=options.width,
            layers=options.layers, heads=options.heads, kv_heads=options.kv_heads,
            hidden=options.hidden), tie_embeddings=options.tie_embeddings, eos=eos))
    taken = sorted(set(extra) & {"vocab_size", "seq_len"})
    if taken:
        raise TrainerError("--model_kwargs sets {}, which the trainer sets itself".format(
            taken[0]), "leave it out: the vocabulary comes from the shards, the length from "
            "--seq_len", EX_USAGE)
    target = models.import_callable(config.model)
    kwargs = dict(extra, vocab_size=vocab_size, seq_len=options.seq_len)
    try:
        model = target(**kwargs)
    except Exception as error:  # the user's code
        raise TrainerError("--model={}({}) failed: {}".format(
            config.model, ", ".join("{}={!r}".format(*item) for item in kwargs.items()),
            models.cause(error)), "a language model's callable takes vocab_size and seq_len "
            "(and --model_kwargs' keywords)", EX_USAGE)
    if not isinstance(model, torch.nn.Module):
        raise TrainerError("--model={} returned a {}, not a torch.nn.Module".format(
            config.model, type(model).__name__), "return the model itself", EX_USAGE)
    with torch.no_grad():
        try:
            logits = model(torch.zeros(1, options.seq_len, dtype=torch.long))
        except Exception as error:
            raise TrainerError("--model={} failed on tokens 1 x {}: {}".format(
                config.model, options.seq_len, models.cause(error)),
                "it takes token ids N x L", EX_USAGE)
    if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (1, options.seq_len,
                                                                       vocab_size):
        raise TrainerError("--model={} returned {} for tokens 1 x {}, not logits 1 x {} x {}"
                           .format(config.model, tuple(getattr(logits, "shape", ())) or
                                   type(logits).__name__, options.seq_len, options.seq_len,
                                   vocab_size), "return a tensor of scores N x L x vocab_size",
                           EX_USAGE)
    return model


def run(config: TrainConfig, options: LmOptions, *, paths: Optional[OutputPaths] = None
        ) -> Dict[str, Any]:
    """Train and evaluate; returns the summary (``trainer.fit``'s, with tokens/s and MFU)."""
    # A gs:// split's shards are downloaded to a local folder of the run's, mapped from there
    # (unless streamed: ``how_to_read``).
    cache = scratch.folder("tokens") if (config.data_dir or "").startswith("gs://") and \
        not config.fake_data else ""
    try:
        return _train(config, options, paths, cache)
    finally:
        if cache:
            scratch.release(cache)


def _train(config: TrainConfig, options: LmOptions, paths: Optional[OutputPaths],
           cache: str) -> Dict[str, Any]:
    topology = devices.detect(config.devices)
    torch.manual_seed(config.seed)
    windows, vocab_size, eos = token_data(config, options.seq_len, cache, options.token_reads)
    model = build_model(config, options, vocab_size, eos)
    batch, eval_batch, host = devices.batch_layout(config.step_batch_size,
                                                   config.eval_batch_size or config.batch_size,
                                                   topology)
    source = DatasetSource(windows["train"], windows.get("val"), batch, eval_batch,
                           config.seed, host, resolve_workers(config.num_workers),
                           topology.devices)
    parameters = sum(parameter.numel() for parameter in model.parameters())
    flops = flops_per_token(model, options.seq_len)
    log.info("language model: %s, %.1fM parameters, %.3g model FLOPs a token; %d training "
             "windows of %d tokens", config.model or "--preset=" + options.preset,
             parameters / 1e6, flops, len(windows["train"]), options.seq_len)
    spec = TrainSpec("lm-" + (config.model or options.preset), model, source, next_token_loss,
                     topk=(), token_scores=2, perplexity=True, eval_rows=source.real_rows,
                     tokens_per_example=options.seq_len, flops_per_token=flops)
    return fit(config, spec, paths or OutputPaths.resolve(config.job_dir, {}), topology)
