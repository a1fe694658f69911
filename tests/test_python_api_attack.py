"""Defects found by attacking the Python API outside the layers as a careless user would (analysis,
ELMo's helpers, the data loaders): each test is the user's call that went wrong, and what it must do."""

from __future__ import annotations

import math

import pytest
import torch

from highwaynet import analysis, data, elmo
from highwaynet.elmo.chars import word_to_ids
from highwaynet.nn import Highway


def _bilm() -> elmo.ELMoBiLM:
    torch.manual_seed(0)
    return elmo.ELMoBiLM(4, 8, 1, filters=((1, 4), (2, 4)), num_highway=1, char_dim=4)


# -- analysis ------------------------------------------------------------------------------------


def test_gate_means_counts_exactly_for_a_low_precision_model():
    """The count of values was kept in the gate's dtype: in bfloat16 (8 bits of mantissa) it stopped
    growing exactly after a few hundred values, and the mean came out about 2% off."""
    torch.manual_seed(0)
    net = Highway(4, 1).to(torch.bfloat16)
    batches = [torch.randn(1000, 4, dtype=torch.bfloat16) for _ in range(40)]
    with analysis.gate_means(net) as means, analysis.record_gates(net) as record:
        for x in batches:
            net(x)
    exact = record.values(0).double().mean().item()
    assert means["gates.0"] == pytest.approx(exact, rel=1e-9)


def test_mean_per_gate_of_a_model_without_gates_is_empty():
    """A model without gates: one mean per gate is no mean, not torch.stack's RuntimeError."""
    model = torch.nn.Linear(2, 2)
    with analysis.record_gates(model) as record:
        model(torch.randn(3, 2))
    means = record.mean_per_gate()
    assert means.shape == (0,) and means.dtype == torch.float32


# -- ELMo ----------------------------------------------------------------------------------------


def test_a_stateful_bilm_runs_outside_inference_mode_after_running_inside_it():
    """Its carried states were updated in place: made under torch.inference_mode(), they were inference
    tensors, and the next call outside it failed with torch's "Inplace update to inference tensor"."""
    ids_two, ids_one = elmo.batch_to_ids([["the", "cat"], ["a"]]), elmo.batch_to_ids([["dogs", "bark"]])
    inside, outside = _bilm(), _bilm()
    with torch.inference_mode():
        inside(ids_two)
    with torch.no_grad():
        outside(ids_two)
        expected = [outside(ids_one)[0][-1], outside(ids_two)[0][-1]]
        got = [inside(ids_one)[0][-1], inside(ids_two)[0][-1]]  # (a narrower batch, then as wide)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    assert not inside.state_h.is_inference()


def test_remove_sentence_boundaries_refuses_a_mask_that_is_not_a_prefix():
    """A mask with a hole (valid, padding, valid) was cut as if it were a prefix: the padding was kept
    as a token, silently."""
    layer = torch.randn(1, 4, 3)
    with pytest.raises(ValueError, match="mask"):
        elmo.remove_sentence_boundaries(layer, torch.tensor([[True, False, True, True]]))


def test_remove_sentence_boundaries_gives_zeros_past_the_end_whatever_the_padding_holds():
    """Its docstring (and AllenNLP's) promise zeros where the new mask is False; multiplying by the mask
    turned padding of inf or NaN into NaN."""
    layer = torch.randn(2, 5, 3)
    layer[1, 3:] = math.inf
    layer[1, 4, 0] = math.nan
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    out, kept = elmo.remove_sentence_boundaries(layer, mask)
    assert kept.tolist() == [[True, True, True], [True, False, False]]
    assert torch.equal(out[0], layer[0, 1:4])
    assert torch.equal(out[1, 0], layer[1, 1]) and torch.equal(out[1, 1:], torch.zeros(2, 3))


@pytest.mark.parametrize("word, max_characters, error", [
    ("hi", 1, ValueError), ("<S>", 2, ValueError), ("hi", 3, ValueError), ("hi", 6.0, TypeError),
    ("hi", True, TypeError), (3, 50, TypeError), (b"hi", 50, TypeError)])
def test_word_to_ids_refuses_bad_arguments_by_name(word, max_characters, error):
    """word_to_ids("hi", 1) gave 3 ids where 1 was asked, 6.0 a TypeError from inside a slice, a
    non-str word an AttributeError; batch_to_ids already asks for at least 4."""
    with pytest.raises(error, match="word|max_characters"):
        word_to_ids(word, max_characters)


def test_word_to_ids_gives_max_characters_ids():
    assert word_to_ids("hi", 4) == [259, 105, 106, 260]
    for word in ("hi", "<S>", "</S>", "é" * 40, " "):
        assert len(word_to_ids(word, 4)) == 4 and len(word_to_ids(word)) == 50


# -- data ----------------------------------------------------------------------------------------


def test_random_crop_flip_passes_an_empty_batch_through():
    """An empty batch (the last batch of an exhausted split) failed in torch's amin()."""
    x = torch.randn(0, 1, 5, 5)
    assert data.RandomCropFlip(2, 0.5)(x).shape == (0, 1, 5, 5)


@pytest.fixture
def corpus(tmp_path):
    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.txt").write_text("the cat sat on the mat\na cat sat\n")
    return data.load_corpus(str(tmp_path), "word")


@pytest.mark.parametrize("split", ["nope", "vocab", "index", None, 0])
def test_unigram_entropy_refuses_a_split_that_is_not_one(corpus, split):
    """unigram_entropy_bits("nope") raised an AttributeError, ("vocab") torch.bincount's TypeError (a
    choice refused by name, as ngram_nats refuses its split)."""
    with pytest.raises(ValueError, match="split"):
        corpus.unigram_entropy_bits(split)
    assert corpus.unigram_entropy_bits("train") > 0


# -- training ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [True, 0, None, 1.5, ["cpu"]])
def test_pick_device_refuses_what_is_not_a_device_by_name(name):
    """pick_device(True) (or 0, None) failed with an AttributeError on bool.type."""
    from highwaynet.training import pick_device

    with pytest.raises(TypeError, match="name"):
        pick_device(name)
    assert pick_device(torch.device("cpu")) == torch.device("cpu")
