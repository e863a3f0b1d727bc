"""Hugging Face's own models (``transformers``' Llama and GPT-2, made from a config as users
pretrain them) trained through ``trainer.train`` on the XLA CPU device as their authors meant:
on the model's own causal loss over rows padded on the right (``attention_mask`` 0 and labels
-100 there, as Hugging Face's collator makes them), the input and output embeddings one tensor
(``tie_word_embeddings``), the model handed back on the host for ``save_pretrained``,
``model.pt`` loading strictly into a fresh model, the evaluation's
loss the model's own on the evaluation rows, and ``--remat=block`` recomputing the decoder
layers (``model.layers``, ``transformer.h``) to the weights of none, on one device and split
over four under fsdp. The model's ``use_cache`` (on by default) is off in the trainer's calls:
with it, each recomputed layer appended its keys and values to the cache a second time and
the step failed on a mask of half the keys' length."""

import json
import logging
import math

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from trainer import own_flags, own_loop, xla
from trainer.config import TrainConfig
from trainer.errors import TrainerError
from trainer.outputs import OutputPaths

VOCAB, LENGTH = 256, 12


def llama(seed=0):
    """A two-layer Llama, its embeddings tied; the embedding and the MLP's projections are
    large enough (16,384 elements) for fsdp to split, the attention's are not."""
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2 * LENGTH,
        tie_word_embeddings=True))


def gpt2(seed=0, dropout=0.1):
    """A two-layer GPT-2 (its embeddings tied, as always), dropout at ``dropout``."""
    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4,
                                      n_positions=2 * LENGTH, resid_pdrop=dropout,
                                      embd_pdrop=dropout, attn_pdrop=dropout,
                                      bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1))


class PaddedRows(torch.utils.data.Dataset):
    """Rows of 6 to 12 tokens, padded on the right to 12 as Hugging Face's collator pads:
    ``attention_mask`` 0 and ``labels`` -100 on the padding."""

    def __init__(self, count, seed):
        generator = torch.Generator().manual_seed(seed)
        lengths = torch.randint(6, LENGTH + 1, (count, 1), generator=generator)
        self.mask = (torch.arange(LENGTH) < lengths).long()
        self.ids = torch.randint(1, VOCAB, (count, LENGTH), generator=generator) * self.mask
        self.labels = torch.where(self.mask.bool(), self.ids, torch.full_like(self.ids, -100))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, index):
        return {"input_ids": self.ids[index], "attention_mask": self.mask[index],
                "labels": self.labels[index]}


def train(model, job, **flags):
    """``trainer.train``'s run of ``model`` on 64 padded rows (16 to evaluate): its summary,
    its ``model.pt``."""
    settings = dict(data_dir=own_flags.DATA_FROM, batch_size=16 // xla.device_counts()[0],
                    num_epochs=2, lr=0.01, lr_batch=0, warmup_epochs=0, num_workers=0,
                    log_steps=0, job_dir=str(job), seed=1, optimizer="adamw")
    settings.update(flags)
    config = TrainConfig(**settings)
    summary = own_loop.run_own(config, OutputPaths.resolve(config.job_dir, {}), model,
                               PaddedRows(64, seed=0), PaddedRows(16, seed=1), None)
    return summary, torch.load(str(job / "model.pt"), weights_only=False)


@pytest.mark.parametrize("step_mode", [xla.COMPILED, xla.LAZY])
def test_llama_trains_on_its_own_loss_with_its_embeddings_one_tensor(tmp_path, step_mode):
    """AdamW, 8 steps. The evaluation's loss is the model's own on the 16 evaluation rows
    (one batch) from model.pt's weights, within 1e-4 relative: the same float32 arithmetic in
    another order (sums of at most 256 terms, 256 x 2^-24 = 1.5e-5 relative each, through two
    layers and a mean), and its perplexity is exp of it."""
    start = llama().state_dict()
    model = llama()
    summary, state = train(model, tmp_path / "job", step_mode=step_mode)
    assert model.config.use_cache  # the user's config as it was: the trainer only passes False
    # Handed back on the host, tied, ready for Hugging Face's own saving and loading.
    assert {parameter.device.type for parameter in model.parameters()} == {"cpu"}
    assert model.lm_head.weight is model.model.embed_tokens.weight
    model.save_pretrained(str(tmp_path / "saved"))
    fresh = LlamaForCausalLM.from_pretrained(str(tmp_path / "saved"))
    assert fresh.state_dict().keys() == state.keys()
    assert all(torch.equal(fresh.state_dict()[name], state[name]) for name in state)
    fresh.load_state_dict(state, strict=True)
    embedding = state["model.embed_tokens.weight"]
    assert not torch.equal(embedding, start["model.embed_tokens.weight"])
    assert torch.equal(state.get("lm_head.weight", embedding), embedding)
    assert fresh.lm_head.weight is fresh.model.embed_tokens.weight
    evaluation = PaddedRows(16, seed=1)
    fresh.eval()
    with torch.no_grad():
        expected = fresh(input_ids=evaluation.ids, attention_mask=evaluation.mask,
                         labels=evaluation.labels).loss
    assert summary["final_eval_loss"] == pytest.approx(float(expected), rel=1e-4)
    final = [json.loads(line) for line in (tmp_path / "job" / "metrics.jsonl").read_text()
             .splitlines() if '"eval"' in line][-1]
    assert final["perplexity"] == pytest.approx(math.exp(final["loss"]), rel=1e-12)


def moved_alike(expected, found, start):
    """Each tensor of ``found`` within 1e-6 of its movement from ``start`` of ``expected``
    (the recomputation's bound: ``tests/trainer/parallel/test_remat.py``), and moved."""
    assert expected.keys() == found.keys()
    for name, weights in expected.items():
        moved = float((weights - start[name]).abs().max())
        assert moved > 0, name
        assert float((found[name] - weights).abs().max()) <= 1e-6 * moved, name


@pytest.mark.parametrize("sharding", ["dp", pytest.param("fsdp", marks=pytest.mark.spmd)])
def test_llama_with_its_layers_recomputed_reaches_the_weights_of_none(tmp_path, sharding,
                                                                     caplog):
    """SGD (its update linear in the gradient), 8 steps over the padded rows whose mask once
    failed the recomputation; under fsdp on 4 devices (make test's SPMD session) with the tied
    embedding and the MLP split, and still one tensor."""
    flags = dict(optimizer="sgd", lr=0.5, weight_decay=0.0, sharding=sharding)
    _, expected = train(llama(), tmp_path / "none", **flags)
    with caplog.at_level(logging.INFO, logger="trainer"):
        summary, found = train(llama(), tmp_path / "block", remat="block", **flags)
    assert summary["remat"] == "block"
    assert ("--remat=block: 2 blocks (LlamaDecoderLayer, model.layers.0 ... model.layers.1) "
            "recompute") in caplog.text
    if sharding == "fsdp":
        assert "(13 of 20 parameters held whole: too small or indivisible)" in caplog.text
    moved_alike(expected, found, llama().state_dict())
    assert torch.equal(found.get("lm_head.weight", found["model.embed_tokens.weight"]),
                       found["model.embed_tokens.weight"])


def test_gpt2s_dropout_is_one_line_under_remat_and_without_it_recomputes_to_none(tmp_path):
    """GPT-2's default dropout (0.1) cannot be recomputed (a second forward draws other
    masks): one line naming the module, with the hint. At 0 its blocks (``transformer.h``,
    their ``Conv1D`` layers) recompute to the weights of none."""
    with pytest.raises(TrainerError) as refused:
        train(gpt2(), tmp_path / "refused", remat="block")
    assert refused.value.message == (
        "--remat=block would recompute transformer.h.0 with Dropout "
        "transformer.h.0.attn.attn_dropout (p=0.1): the second forward pass would draw other "
        "masks")
    assert refused.value.hint.startswith("set the model's dropout and drop-path rates to 0")
    flags = dict(optimizer="sgd", lr=0.5, weight_decay=0.0)
    _, expected = train(gpt2(dropout=0.0), tmp_path / "none", **flags)
    _, found = train(gpt2(dropout=0.0), tmp_path / "block", remat="block", **flags)
    start = gpt2(dropout=0.0).state_dict()
    moved_alike(expected, found, start)


@pytest.mark.parametrize("step_mode, sharding", [
    (xla.COMPILED, "dp"), (xla.LAZY, "dp"),
    pytest.param(xla.COMPILED, "fsdp", marks=pytest.mark.spmd)])
def test_llama_trains_under_bf16_autocast_with_its_layers_recomputed(tmp_path, step_mode,
                                                                    sharding):
    """--precision=bf16: its attention's float32 query and key (the rotary embedding's) meet
    a bfloat16 value, which torch_xla's autocast once refused at the first step. The weights
    stay float32, and the evaluation's loss is the model's own under CPU autocast (the same
    casts) within 16 bfloat16 roundings (2^-8 each) of the largest logit: a cross-entropy
    moves at most twice as far as its logits, each rounded along 8 stages (the embedding,
    2 x attention and MLP, the norm, the head)."""
    summary, state = train(llama(), tmp_path / "job", step_mode=step_mode, sharding=sharding,
                           precision="bf16", remat="block")
    assert {tensor.dtype for tensor in state.values()} == {torch.float32}
    fresh = llama(seed=5)
    fresh.load_state_dict(state, strict=True)
    fresh.eval()
    evaluation = PaddedRows(16, seed=1)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        expected = fresh(input_ids=evaluation.ids, attention_mask=evaluation.mask,
                         labels=evaluation.labels)
    bound = 2 * 8 * 2 ** -8 * float(expected.logits.float().abs().max())
    assert abs(summary["final_eval_loss"] - float(expected.loss)) <= bound


@pytest.mark.spmd
def test_gpt2_under_fsdp_compiles_one_training_program(tmp_path):
    """GPT-2's MLP bias (256 elements) is held whole beside its split weight; XLA once
    returned its new value split, and the second step compiled a program of its own for
    that layout (a TPU's minutes, once a run). Now: one program for training, one for the
    evaluation, from the first step to the last."""
    summary, _ = train(gpt2(), tmp_path / "job", sharding="fsdp", log_steps=1)
    records = [json.loads(line) for line in (tmp_path / "job" / "metrics.jsonl").read_text()
               .splitlines()]
    first_epoch = [record for record in records if record.get("kind") == "train"][:4]
    assert [record["graphs_compiled"] for record in first_epoch] == [1, 1, 1, 1]
    assert summary["compile_count"] == 2
