"""trainer.lm.decoder: the decoder is causal (no position sees a later token), its grouped
key/value heads and tied embeddings are what the shape says, a shape that cannot be built is
one line, and the model FLOPs of a token are counted from its layers."""

import pytest
import torch

from trainer.errors import TrainerError
from trainer.lm.decoder import Decoder, DecoderShape, flops_per_token, preset

SHAPE = DecoderShape(vocab_size=50, seq_len=12, width=32, layers=2, heads=4, kv_heads=2)


def test_no_position_sees_a_later_token():
    torch.manual_seed(0)
    model = Decoder(SHAPE).eval()
    tokens = torch.randint(0, 50, (2, 12))
    changed = tokens.clone()
    changed[:, 7:] = (changed[:, 7:] + 1) % 50
    with torch.no_grad():
        before, after = model(tokens), model(changed)
    assert before.shape == (2, 12, 50)
    assert torch.equal(before[:, :7], after[:, :7])  # the same ops on the same values
    assert not torch.equal(before[:, 7:], after[:, 7:])


def test_with_its_end_token_known_no_document_sees_the_one_before():
    """Token 49 ends a document at position 4: positions 5 on never see 0 to 4 (changing
    them changes nothing after), and 0 to 4 still see each other."""
    torch.manual_seed(0)
    model = Decoder(DecoderShape(**dict(SHAPE.__dict__, eos=49))).eval()
    tokens = torch.randint(0, 49, (2, 12))
    tokens[:, 4] = 49
    changed = tokens.clone()
    changed[:, :4] = (changed[:, :4] + 1) % 49
    with torch.no_grad():
        before, after = model(tokens), model(changed)
    assert torch.equal(before[:, 5:], after[:, 5:])
    assert not torch.equal(before[:, 4], after[:, 4])  # the end token is its document's


def test_grouped_heads_and_tied_embeddings_are_as_the_shape_says():
    model = Decoder(SHAPE)
    attention = model.blocks[0].attention
    assert attention.key_value.weight.shape == (2 * 2 * 8, 32)  # 2 kv heads of 8
    assert model.head.weight is model.embed.weight
    untied = Decoder(DecoderShape(**dict(SHAPE.__dict__, tie_embeddings=False)))
    assert untied.head.weight is not untied.embed.weight
    assert "mask" not in model.state_dict() and "tables" not in model.state_dict()


@pytest.mark.parametrize("sizes, text", [
    (dict(width=30), "--width=30 is no multiple of --heads=4"),
    (dict(kv_heads=3), "--heads=4 is no multiple of --kv_heads=3"),
    (dict(width=12, heads=4, kv_heads=4), "a head's width (3) must be even"),
])
def test_a_shape_that_cannot_be_built_is_one_line(sizes, text):
    with pytest.raises(TrainerError) as raised:
        Decoder(DecoderShape(**dict(SHAPE.__dict__, **sizes)))
    assert text in raised.value.message and raised.value.exit_code == 64


def test_presets_and_their_overrides():
    assert preset("tiny", 257, 64).width == 64
    assert preset("small", 257, 64, layers=2).layers == 2
    with pytest.raises(TrainerError, match="--preset='huge' is not one of tiny, small"):
        preset("huge", 257, 64)


def test_model_flops_count_every_matrix_multiply_and_attention():
    """6 per weight of each linear layer (forward 2, backward 4), the tied output projection
    included once, the embedding lookup not; attention 12 x layers x width x seq_len."""
    model = Decoder(SHAPE)
    ffn = SHAPE.ffn
    per_block = 32 * 32 + 32 * 2 * 2 * 8 + 32 * 32 + 32 * 2 * ffn + ffn * 32
    weights = 2 * per_block + 50 * 32
    assert flops_per_token(model, 12) == 6 * weights + 12 * 2 * 32 * 12
