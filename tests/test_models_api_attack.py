"""Defects found by attacking, as a careless user would, the public API the earlier attacks touched least
(``highwaynet.models``, ``highwaynet.nn``'s character encoders, ``highwaynet.elmo``'s Python API, and the
helpers around them): each test is the user's call that went wrong, and what it must do."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from highwaynet import elmo
from highwaynet.data import encode_words
from highwaynet.models import (
    CausalTransformer,
    CharAwareLanguageModel,
    LSTMLanguageModel,
    RHNLanguageModel,
    SentenceClassifier,
)
from highwaynet.models.lm import generate, sample_tokens
from highwaynet.nn import RHN, CharCNNHighway, CharVocab, HighwayLSTM

# -- encode_words: the vocabulary's ids --------------------------------------------------------------


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (2.7, TypeError), (True, TypeError), ("2", TypeError),
                                        (None, TypeError), (2**70, ValueError), (torch.tensor(2), TypeError)])
def test_encode_words_refuses_an_index_whose_ids_are_not_ids(bad, error):
    """A float id was truncated by torch.tensor (2.7 read as 2), a bool read as 1, a negative id kept (an
    embedding reads it from its end): silent wrong ids; a string or None failed inside torch."""
    for index, words in (({"<unk>": 1, "cat": bad}, ["cat"]), ({"<unk>": bad, "cat": 2}, ["dog"])):
        with pytest.raises(error, match=r"index\['(cat|<unk>)'\] must"):
            encode_words(words, index)
    with pytest.raises(error, match=r"index\['cat'\] must"):  # (found lower-cased)
        encode_words(["Cat"], {"<unk>": 1, "cat": bad}, fold_case=True)


def test_encode_words_takes_numpy_ids_and_gives_the_same():
    index = {"<unk>": np.int64(1), "cat": np.int32(5)}
    assert encode_words(["cat", "dog"], index).tolist() == [5, 1]
    assert encode_words(["Cat"], {"<unk>": 1, "cat": 5}, fold_case=True).tolist() == [5]


# -- generate and sample_tokens: their arguments -----------------------------------------------------


@pytest.fixture(scope="module")
def model() -> RHNLanguageModel:
    torch.manual_seed(0)
    return RHNLanguageModel(10, 8, depth=1)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"length": 2.5}, TypeError, "length must be an int"),
    ({"length": True}, TypeError, "length must be an int"),   # (was one token)
    ({"length": "3"}, TypeError, "length must be an int"),
    ({"length": -1}, ValueError, "length must be at least 0"),  # (was no tokens, silently)
    ({"temperature": True}, TypeError, "temperature must be a real number"),  # (was 1.0)
    ({"temperature": "1"}, TypeError, "temperature must be a real number"),
    ({"temperature": torch.tensor(1.0)}, TypeError, "temperature must be a real number"),
    ({"generator": 3}, TypeError, "generator must be a torch.Generator"),
    ({"prompt": [1, 2]}, TypeError, "prompt must be a torch.Tensor"),
    ({"prompt": np.array([1, 2])}, TypeError, "prompt must be a torch.Tensor"),
    ({"prompt": torch.tensor([1.0, 2.0])}, TypeError, "prompt must be an integer tensor"),
    ({"prompt": torch.tensor([[1, 2], [3, 4]])}, ValueError, r"prompt must be 1-D token ids"),  # (was flattened)
    ({"model": "rhn"}, TypeError, "model must be an nn.Module"),
    ({"model": torch.nn.Identity()}, ValueError, "model must be a language model with parameters"),
])
def test_generate_refuses_bad_arguments_by_name(model, kwargs, error, match):
    """Each was an error from inside torch or Python ("'float' object cannot be interpreted as an integer",
    "'list' object has no attribute 'numel'", "generator raised StopIteration"), or a silent wrong answer."""
    arguments = {"model": model, "prompt": torch.tensor([1, 2]), "length": 3, **kwargs}
    with pytest.raises(error, match=match):
        generate(**arguments)
    with pytest.raises(error, match=match):  # (at the call, not at the first token asked for)
        sample_tokens(**arguments)


def test_generate_still_takes_what_it_took(model):
    prompt = torch.tensor([1, 2])
    assert generate(model, prompt, 0).shape == (0,)
    assert generate(model, torch.tensor(3), 2).shape == (2,)  # (one token)
    assert generate(model, prompt.int(), np.int64(4), np.float32(0.5)).shape == (4,)
    a = generate(model, prompt, 5, 0.7, torch.Generator().manual_seed(3))
    assert torch.equal(a, torch.tensor(list(sample_tokens(model, prompt, 5, 0.7, torch.Generator().manual_seed(3)))))


# -- lengths on the meta device --------------------------------------------------------------------


@pytest.mark.parametrize("lengths_on", ["meta", "cpu"])
@pytest.mark.parametrize("make", [lambda: HighwayLSTM(3, 4, num_layers=2, device="meta"),
                                  lambda: RHN(3, 4, device="meta")], ids=["HighwayLSTM", "RHN"])
def test_a_model_on_the_meta_device_takes_lengths(make, lengths_on):
    """Shapes worked out on the meta device: lengths there failed in the check ("Tensor.item() cannot be
    called on meta tensors"), and a HighwayLSTM's packing failed with CPU lengths too ("Cannot copy out
    of meta tensor; no data!")."""
    layer = make()
    out, _ = layer(torch.randn(5, 2, 3, device="meta"), lengths=torch.tensor([5, 3], device=lengths_on))
    assert out.device.type == "meta" and out.shape == (5, 2, layer.hidden_size * (2 if layer.bidirectional else 1))
    with pytest.raises(ValueError, match="lengths"):  # (the shape is still checked)
        layer(torch.randn(5, 2, 3, device="meta"), lengths=torch.tensor([5, 3, 1], device=lengths_on))


@pytest.mark.parametrize("make", [lambda: HighwayLSTM(3, 4), lambda: RHN(3, 4)], ids=["HighwayLSTM", "RHN"])
def test_lengths_on_the_meta_device_are_refused_for_an_input_with_values(make):
    with pytest.raises(ValueError, match="lengths that hold values"):
        make()(torch.randn(5, 2, 3), lengths=torch.tensor([5, 3], device="meta"))


def test_a_sentence_classifier_refuses_lengths_on_the_meta_device():
    torch.manual_seed(0)
    model = SentenceClassifier(20, 2, embed_dim=4, encoder="hbilstm", hidden_size=4)
    with pytest.raises(ValueError, match="lengths that hold values"):
        model(torch.tensor([[3, 4, 5]]), torch.tensor([3], device="meta"))


# -- ids on another device than the table they index -------------------------------------------------


def _language_models() -> list[torch.nn.Module]:
    torch.manual_seed(0)
    word_chars = CharVocab.from_words(["ab", "cd"]).encode(["<unk>", "ab", "cd", "abcd"])
    return [RHNLanguageModel(4, 8, depth=1), LSTMLanguageModel(4, 8), CausalTransformer(4, 8, 1, heads=2, context=4),
            CharAwareLanguageModel(word_chars, 8, 8, encoder="compact")]


@pytest.mark.parametrize("index", range(4), ids=["RHNLanguageModel", "LSTMLanguageModel", "CausalTransformer",
                                                   "CharAwareLanguageModel"])
def test_a_language_model_refuses_tokens_on_the_meta_device(index):
    """Tokens on the meta device hold no values: a model with values indexed its embedding (or its words'
    characters) by whatever memory it found, and gave logits of it (a CausalTransformer's not finite, a
    CharAwareLanguageModel's ids of 140 trillion), silently."""
    model = _language_models()[index]
    tokens = torch.randint(4, (3, 2))
    with pytest.raises(ValueError, match="expects tokens on cpu, where its parameters are, got meta"):
        model(tokens.to("meta"))
    on_meta = model.to("meta")  # (a model on the meta device still takes tokens anywhere)
    assert on_meta(tokens)[0].shape == on_meta(tokens.to("meta"))[0].shape == (3, 2, 4)


def test_character_encoders_refuse_ids_on_the_meta_device():
    torch.manual_seed(0)
    vocab = CharVocab.from_words(["hello", "world"])
    encoder = CharCNNHighway(len(vocab), filters=((1, 3), (2, 4)))
    with pytest.raises(ValueError, match="expects chars on cpu, where its parameters are, got meta"):
        encoder(vocab.encode(["hello"]).to("meta"))
    classifier = SentenceClassifier(20, 2, embed_dim=4, hidden_size=4)
    with pytest.raises(ValueError, match="expects tokens on cpu, where its parameters are, got meta"):
        classifier(torch.tensor([[3, 4, 5]], device="meta"), torch.tensor([3]))


def test_a_causal_transformer_refuses_a_state_on_another_device_by_name():
    """torch.cat's "Tensor on device cpu is not on the expected device meta!"."""
    model = _language_models()[2]
    with pytest.raises(ValueError, match="state must be on cpu, the device of tokens, got meta"):
        model(torch.randint(4, (3, 2)), torch.randint(4, (2, 2), device="meta"))


# -- sizes of NumPy's integer types, as every other constructor takes them ------------------------


def test_an_lstm_language_model_takes_numpy_sizes():
    """check_size took np.int64(8), then the raw value went to nn.LSTM: "hidden_size should be of type int"."""
    model = LSTMLanguageModel(np.int64(20), np.int64(8), np.int64(2))
    assert model.rnn.hidden_size == 8 and type(model.rnn.hidden_size) is int and model.rnn.num_layers == 2
    assert model(torch.randint(20, (3, 2)))[0].shape == (3, 2, 20)


# -- CharVocab and CharCNNHighway -------------------------------------------------------------------


@pytest.mark.parametrize("length, error", [(-1, ValueError), (0, ValueError), (2, ValueError), (3.5, TypeError),
                                           (True, TypeError)])
def test_char_vocab_word_ids_refuses_a_length_that_is_not_one(length, error):
    """A negative or zero length cut the word from its end (word_ids("abcabc", -1) gave 5 ids, of "abc"),
    silently; a float failed in Python's slicing ("slice indices must be integers")."""
    with pytest.raises(error, match="length must be"):
        CharVocab("abc").word_ids("abcabc", length)
    assert CharVocab("abc").word_ids("abcabc", np.int64(4)) == CharVocab("abc").word_ids("abcabc", 4)


def test_char_cnn_highway_preset_refuses_a_name_that_is_not_a_string():
    """A list failed in the dict lookup: "unhashable type: 'list'"."""
    with pytest.raises(ValueError, match="unknown preset .*name must be one of"):
        CharCNNHighway.preset(["kim-small"], 10)


def test_a_sentence_classifier_of_words_refuses_word_chars_it_would_not_read():
    """word_chars and num_chars given without word_features='chars' or 'words+chars' were ignored: a model
    meant to read characters read none, silently."""
    word_chars = torch.zeros(20, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="word_chars and num_chars are read only with word_features"):
        SentenceClassifier(20, 2, embed_dim=4, hidden_size=4, word_chars=word_chars, num_chars=5)


# -- ELMo's Python API -----------------------------------------------------------------------------


def test_bilm_token_vectors_refuses_a_mask_that_is_not_a_bool_one():
    """A mask of 0s and 1s (torch.long) indexed rows 0 and 1 instead of selecting the valid ones: the
    token vectors came out wrong, silently; no mask was an AttributeError, one of another shape torch's
    IndexError."""
    torch.manual_seed(0)
    bilm = elmo.ELMoBiLM(4, 8, 1, filters=((1, 4), (2, 4)), num_highway=1, char_dim=4)
    ids = elmo.batch_to_ids([["the", "cat"], ["a"]])
    mask = (ids > 0).any(-1)
    for bad, error in ((mask.long(), ValueError), (mask[:1], ValueError), (None, TypeError)):
        with pytest.raises(error, match="token_vectors expects"):
            bilm.token_vectors(ids, bad)
    with pytest.raises(ValueError, match="mask must be on cpu, the device of ids, got meta"):
        bilm.token_vectors(ids, mask.to("meta"))
    assert bilm.token_vectors(ids, mask).shape == (2, 4, 4)


def test_elmo_helpers_refuse_tensors_on_another_device_by_name():
    """Each failed inside torch: "Tensor on device meta is not on the expected device cpu!" (ScalarMix),
    aten::equal's NotImplementedError for the meta device (ProjectedLSTM, remove_sentence_boundaries)."""
    layers, mask = [torch.randn(2, 3, 4), torch.randn(2, 3, 4)], torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"layers\[1\] must be on cpu, the device of ScalarMix, got meta"):
        elmo.ScalarMix(2)([layers[0], layers[1].to("meta")])
    with pytest.raises(ValueError, match="mask must be on cpu, the device of ScalarMix, got meta"):
        elmo.ScalarMix(2, layer_norm=True)(layers, mask.to("meta"))
    with pytest.raises(ValueError, match="mask must be on cpu, the device of x, got meta"):
        elmo.ProjectedLSTM(4, 3, 5)(layers[0], mask.to("meta"))
    with pytest.raises(ValueError, match="mask must be on cpu, the device of layer, got meta"):
        elmo.remove_sentence_boundaries(layers[0], mask.to("meta"))
    assert elmo.ScalarMix(2, layer_norm=True)(layers, mask).shape == (2, 3, 4)
