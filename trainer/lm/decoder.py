"""The language model ``python -m trainer.lm`` builds: a decoder-only transformer as current
open models are made (Llama's recipe): RMSNorm before each sublayer, rotary positions,
grouped-query attention, a SwiGLU feed-forward layer, and the output projection tied to the
token embedding (optional). Sized by a named preset (``PRESETS``) or by its fields.

Tokens ``N x L`` in, logits ``N x L x V`` out. A sequence packs several documents, each ended
by the end-of-sequence token (``trainer.data.tokens``): given its id (``eos``), attention is
causal within each document and never crosses into the one before; without it, causal over
the whole sequence (GPT-2's pre-training).

``flops_per_token``: the model FLOPs of one trained token (forward and backward: 3 x the
forward's 2 per multiply-add) for MFU (``trainer.throughput``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Dict

import torch
import torch.nn.functional as F
from torch import nn

from trainer.errors import EX_USAGE, TrainerError


@dataclass(frozen=True)
class DecoderShape:
    """A decoder's sizes: ``heads`` query heads of ``width // heads`` each, sharing
    ``kv_heads`` key and value heads (grouped-query attention; ``heads`` for plain
    multi-head), a SwiGLU hidden layer of ``hidden``."""

    vocab_size: int
    seq_len: int
    width: int = 256
    layers: int = 4
    heads: int = 8
    kv_heads: int = 4
    hidden: int = 0  # 0: about 8/3 of width, a multiple of 64 (Llama's rule)
    tie_embeddings: bool = True
    rope_base: float = 10000.0
    eos: int = -1  # the end-of-document token: attention stays within a document; -1: none

    @property
    def head_width(self) -> int:
        return self.width // self.heads

    @property
    def ffn(self) -> int:
        return self.hidden or 64 * -(-(8 * self.width // 3) // 64)

    def check(self) -> "DecoderShape":
        """Itself; a usage error naming the size that does not fit."""
        problems = []
        if min(self.vocab_size, self.seq_len, self.width, self.layers, self.heads,
               self.kv_heads) <= 0:
            problems.append("every size must be positive")
        elif self.width % self.heads:
            problems.append("--width={} is no multiple of --heads={}".format(self.width,
                                                                            self.heads))
        elif self.heads % self.kv_heads:
            problems.append("--heads={} is no multiple of --kv_heads={}".format(
                self.heads, self.kv_heads))
        elif self.head_width % 2:
            problems.append("a head's width ({}) must be even (rotary positions)".format(
                self.head_width))
        if problems:
            raise TrainerError("the decoder's shape does not fit: " + problems[0],
                               "e.g. --preset=small, or --width=256 --heads=8 --kv_heads=4",
                               EX_USAGE)
        return self


# Named sizes: tiny for tests and smoke runs; the others as their names say, counted with a
# 32,000-token vocabulary and tied embeddings.
PRESETS: Dict[str, Dict[str, Any]] = {
    "tiny": dict(width=64, layers=2, heads=4, kv_heads=2),
    "small": dict(width=256, layers=4, heads=8, kv_heads=4),
    "125m": dict(width=768, layers=12, heads=12, kv_heads=12),
    "350m": dict(width=1024, layers=24, heads=16, kv_heads=16),
    "1b": dict(width=2048, layers=16, heads=32, kv_heads=8, hidden=8192),
    "7b": dict(width=4096, layers=32, heads=32, kv_heads=8, hidden=11008),
}


def preset(name: str, vocab_size: int, seq_len: int, **overrides: Any) -> DecoderShape:
    """The shape of preset ``name`` (``PRESETS``) with ``overrides``; a usage error for a
    name not there."""
    if name not in PRESETS:
        raise TrainerError("--preset={!r} is not one of {}".format(name, ", ".join(PRESETS)),
                           "pick a size, or give --model=PACKAGE.MODULE:CALLABLE", EX_USAGE)
    shape = DecoderShape(vocab_size, seq_len, **PRESETS[name])
    return replace(shape, **{key: value for key, value in overrides.items() if value})


class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (x.float() * scale).type_as(x) * self.weight


def rotary_tables(seq_len: int, head_width: int, base: float) -> torch.Tensor:
    """cos and sin of each position's angles, ``2 x L x head_width / 2``."""
    rates = base ** (-torch.arange(0, head_width, 2, dtype=torch.float32) / head_width)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), rates)
    return torch.stack([angles.cos(), angles.sin()])


def rotate(x: torch.Tensor, tables: torch.Tensor) -> torch.Tensor:
    """``x`` (``N x heads x L x head_width``) with its pairs of features turned by each
    position's angles (rotary positions, in the two-halves layout)."""
    cos, sin = tables[0, :x.shape[2]], tables[1, :x.shape[2]]
    first, second = x.float().chunk(2, dim=-1)
    return torch.cat([first * cos - second * sin, first * sin + second * cos], -1).type_as(x)


class Attention(nn.Module):
    def __init__(self, shape: DecoderShape) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_width = shape.heads, shape.kv_heads, \
            shape.head_width
        self.query = nn.Linear(shape.width, shape.heads * shape.head_width, bias=False)
        self.key_value = nn.Linear(shape.width, 2 * shape.kv_heads * shape.head_width,
                                   bias=False)
        self.out = nn.Linear(shape.heads * shape.head_width, shape.width, bias=False)

    def forward(self, x: torch.Tensor, tables: torch.Tensor, mask: torch.Tensor
                ) -> torch.Tensor:
        rows, length, _ = x.shape
        q = self.query(x).view(rows, length, self.heads, self.head_width).transpose(1, 2)
        k, v = self.key_value(x).view(rows, length, 2, self.kv_heads,
                                      self.head_width).permute(2, 0, 3, 1, 4)
        q, k = rotate(q, tables), rotate(k, tables)
        group = self.heads // self.kv_heads  # query heads per key/value head
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_width) + mask
        mixed = scores.softmax(-1) @ v
        return self.out(mixed.transpose(1, 2).reshape(rows, length, -1))


class FeedForward(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, shape: DecoderShape) -> None:
        super().__init__()
        self.gate_up = nn.Linear(shape.width, 2 * shape.ffn, bias=False)
        self.down = nn.Linear(shape.ffn, shape.width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, shape: DecoderShape) -> None:
        super().__init__()
        self.attention_norm, self.attention = RMSNorm(shape.width), Attention(shape)
        self.ffn_norm, self.ffn = RMSNorm(shape.width), FeedForward(shape)

    def forward(self, x: torch.Tensor, tables: torch.Tensor, mask: torch.Tensor
                ) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), tables, mask)
        return x + self.ffn(self.ffn_norm(x))


class Decoder(nn.Module):
    """Tokens ``N x L`` (``L <= seq_len``) to logits ``N x L x vocab_size``."""

    def __init__(self, shape: DecoderShape) -> None:
        super().__init__()
        self.shape = shape.check()
        self.embed = nn.Embedding(shape.vocab_size, shape.width)
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.layers))
        self.norm = RMSNorm(shape.width)
        self.head = nn.Linear(shape.width, shape.vocab_size, bias=False)
        if shape.tie_embeddings:
            self.head.weight = self.embed.weight  # one tensor (trainer.tied_weights keeps it)
        # Not in the state dict: made again from the shape.
        self.register_buffer("tables", rotary_tables(shape.seq_len, shape.head_width,
                                                     shape.rope_base), persistent=False)
        self.register_buffer("mask", torch.full((shape.seq_len, shape.seq_len),
                                                float("-inf")).triu(1), persistent=False)
        self.apply(_initialize)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        mask = self.mask[:tokens.shape[1], :tokens.shape[1]]
        if self.shape.eos >= 0:
            mask = mask + document_mask(tokens, self.shape.eos).unsqueeze(1)
        for block in self.blocks:
            x = block(x, self.tables, mask)
        return self.head(self.norm(x))


def document_mask(tokens: torch.Tensor, eos: int) -> torch.Tensor:
    """``N x L x L``: 0 where the query's and the key's positions are in the same document
    (an ``eos`` token belongs to the document it ends), -inf elsewhere."""
    ends = (tokens == eos).long()
    document = torch.cumsum(ends, dim=1) - ends
    same = document.unsqueeze(2) == document.unsqueeze(1)
    return torch.zeros(same.shape, dtype=torch.float32, device=tokens.device).masked_fill(
        ~same, float("-inf"))


def _initialize(module: nn.Module) -> None:
    """GPT-2's: normal weights of deviation 0.02, zero biases."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=0.02)
        if getattr(module, "bias", None) is not None:
            nn.init.zeros_(module.bias)


def flops_per_token(model: nn.Module, seq_len: int) -> float:
    """The model FLOPs of one trained token: 6 per weight of every matrix multiply (the
    linear layers, the output projection included, the embedding lookup not), plus, for a
    ``Decoder``, attention's scores and mixing: 12 x layers x width x seq_len (each half of
    the causal square would be 6, but MFU counts the whole one, as PaLM's appendix does)."""
    multiplies = sum(module.weight.numel() for module in model.modules()
                     if isinstance(module, nn.Linear))
    attention = 0
    if isinstance(model, Decoder):
        attention = 12 * model.shape.layers * model.shape.width * seq_len
    return float(6 * multiplies + attention)
