"""ELMo's biLM from bilm-tf's files, against an independent float64 NumPy reference of the TensorFlow
computation (tests/elmo_reference.py), on small files the tests write with h5py in the published layout."""

import hashlib
import json
import os
import re
import sys
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from elmo_reference import TensorFlowReference, char_ids, options, write_model

from highwaynet.data.download import DataNotFoundError, UncheckedDownloadWarning
from highwaynet.elmo import MODELS, ELMo, ELMoBiLM, ProjectedLSTM, ScalarMix, batch_to_ids, download_model
from highwaynet.elmo import files as elmo_files
from highwaynet.elmo.chars import sentence_to_ids, word_to_ids
from highwaynet.kernels import explain
from highwaynet.kernels.lstmp import LSTMPPath, lstmp_recurrence, lstmp_recurrence_reference

LONG = "x" * 47 + "é" + "tail"  # 53 bytes: cut to 48, inside the two bytes of é
BATCHES = [
    [["The", "cat", "sat", "."], ["A", LONG], ["<S>", "inside", "</S>"]],
    [["Short"], ["Then", "a", "longer", "sentence", "here", "."]],
    [["résumé", "naïve"], ["x"], ["one", "two", "three"], ["four"]],
]


def _close(ours: torch.Tensor, reference: np.ndarray, atol: float) -> None:
    torch.testing.assert_close(ours.double(), torch.from_numpy(reference), rtol=0, atol=atol)


# -- the character ids -------------------------------------------------------------------------------

def test_character_ids_are_bilm_tfs():
    ids = batch_to_ids([["ab", "<S>", "é"], ["</S>"]])
    assert ids.shape == (2, 5, 50) and ids.dtype == torch.long
    assert ids[0, 0, :4].tolist() == [259, 257, 260, 261]            # <S>: begin word, 256, end word, pad (+1)
    assert ids[0, 4, :4].tolist() == [259, 258, 260, 261]            # </S>
    assert ids[0, 1, :5].tolist() == [259, 98, 99, 260, 261]          # bytes + 1 between the word markers
    assert torch.equal(ids[0, 2], ids[0, 0])                          # the literal <S> is the boundary row
    assert ids[0, 3, :5].tolist() == [259, 0xC3 + 1, 0xA9 + 1, 260, 261]  # é: its two UTF-8 bytes
    assert torch.equal(ids[1, 1], ids[0, 4]) and ids[1, 3:].eq(0).all()   # padding past the end is 0
    assert torch.equal(torch.from_numpy(char_ids([["ab", "<S>", "é"], ["</S>"]])), ids)


def test_a_word_longer_than_50_characters_is_cut_to_48_bytes_as_the_original():
    ids = batch_to_ids([[LONG]])[0, 1]
    body = LONG.encode()[:48]
    assert ids[1:49].tolist() == [b + 1 for b in body] and ids[49].item() == 260  # end-of-word in the last place
    assert body[-1] == 0xC3  # (the cut falls inside é, as bilm-tf's bytes[:48] does)


@pytest.mark.parametrize("bad, error, words", [
    ("a sentence", TypeError, "wrap one sentence in a list"),
    ([["a", "b"], "c d"], TypeError, "mix token lists and strings"),
    (["c d", ["a", "b"]], TypeError, "mix strings and token lists"),
    ([["a"], []], ValueError, "sentence 1 is empty"),
    (["a b", "   "], ValueError, "sentence 1 is empty"),
    ([["a", ""]], ValueError, "sentence 0, token 1 is empty"),
    ([["a", 3]], TypeError, "token 1 is a int"),
    ([b"ab cd"], TypeError, r"sentences\[0\] is bytes, not text: decode it"),  # (it said "token 0 is a int")
    ([None, ["a"]], TypeError, r"sentences\[0\] is a NoneType, not a list of tokens or a string"),  # (not "mix")
])
def test_bad_sentences_are_refused_with_what_is_wrong(bad, error, words):
    with pytest.raises(error, match=words):
        batch_to_ids(bad)


def test_strings_are_split_at_white_space():
    assert torch.equal(batch_to_ids(["a  b\tc", "d"]), batch_to_ids([["a", "b", "c"], ["d"]]))


# -- the biLM against TensorFlow's computation --------------------------------------------------------

@pytest.mark.parametrize("activation, highway, filters", [("relu", 2, None), ("tanh", 1, None),
                                                          ("relu", 0, [[1, 3], [2, 3]])])
def test_token_vectors_are_tensorflows(tmp_path, activation, highway, filters):
    """The character encoder: relu and tanh, 0-2 highway layers, with a projection (16 filters to 6) and
    without one (6 filters, 6 wide)."""
    opts = options(activation=activation, highway=highway, **({"filters": filters} if filters else {}))
    options_file, weights_file, arrays = write_model(tmp_path, opts)
    bilm = ELMoBiLM.from_files(options_file, weights_file)
    assert (bilm.token_encoder.projection is None) == (filters is not None)
    ids = batch_to_ids(BATCHES[0])
    layers, mask = bilm(ids)
    reference = TensorFlowReference(opts, arrays).token_embedding(ids.numpy())
    _close(layers[0][..., :6][mask], reference[mask.numpy()], 1e-6)
    assert torch.equal(layers[0][..., :6], layers[0][..., 6:])  # [e | e]
    assert layers[0][~mask].eq(0).all()


@pytest.mark.parametrize("skip", [True, False])
def test_stateful_biLM_matches_tensorflow_batch_after_batch(tmp_path, skip):
    """Three batches of 3, 2 and 4 sentences of different lengths: each row's LSTM states carried on
    to the next batch's row (rows past a batch kept), both directions, clipping active."""
    opts = options(skip=skip)
    options_file, weights_file, arrays = write_model(tmp_path, opts)
    reference = TensorFlowReference(opts, arrays)
    bilm = ELMoBiLM.from_files(options_file, weights_file)
    for sentences in BATCHES:
        ids = batch_to_ids(sentences)
        layers, mask = bilm(ids)
        expected, expected_mask = reference(ids.numpy())
        assert np.array_equal(mask.numpy(), expected_mask)
        for ours, theirs in zip(layers[1:], expected[1:], strict=True):
            _close(ours, theirs, 1e-6)  # (padding included: zeros past each sentence's end)
    assert reference.clipped_cells > 50 and reference.clipped_outputs > 50  # (the clipping is exercised)
    assert bilm.state_h.shape[2] == 4


def test_float64_model_matches_tensorflow_to_float64_precision(tmp_path):
    opts = options()
    options_file, weights_file, arrays = write_model(tmp_path, opts)
    reference = TensorFlowReference(opts, arrays)
    bilm = ELMoBiLM.from_files(options_file, weights_file, dtype=torch.float64)
    for sentences in BATCHES[:2]:
        ids = batch_to_ids(sentences)
        layers, _ = bilm(ids)
        for ours, theirs in zip(layers[1:], reference(ids.numpy())[0][1:], strict=True):
            _close(ours, theirs, 1e-12)


def test_gate_order_and_forget_bias_are_tensorflows():
    """One step of one cell from a known state, the weights 0 and each gate's bias its own value:
    c = sigmoid(b_f + 1) c0 + sigmoid(b_i) tanh(b_j), h = sigmoid(b_o) tanh(c)."""
    lstm = ProjectedLSTM(1, 1, 1)
    b_i, b_j, b_f, b_o, c0 = 0.3, -0.7, -1.1, 0.9, 0.6
    with torch.no_grad():
        lstm.weight_ih.zero_()
        lstm.weight_hh.zero_()
        lstm.bias.copy_(torch.tensor([b_i, b_j, b_f, b_o]))
    out, (h, c) = lstm(torch.zeros(1, 1, 1), state=(torch.zeros(1, 1), torch.full((1, 1), c0)))
    s = sigmoid_ = 1 / (1 + np.exp(-np.array([b_i, b_f + 1.0, b_o])))
    expected_c = s[1] * c0 + s[0] * np.tanh(b_j)
    assert c.item() == pytest.approx(expected_c, abs=1e-7) and sigmoid_ is s
    assert h.item() == out.item() == pytest.approx(s[2] * np.tanh(expected_c), abs=1e-7)


def test_states_reset_and_stateless(tmp_path):
    options_file, weights_file, _ = write_model(tmp_path, options())
    ids = batch_to_ids(BATCHES[0])
    bilm = ELMoBiLM.from_files(options_file, weights_file)
    first = bilm(ids)[0][-1]
    assert not torch.allclose(bilm(ids)[0][-1], first)  # the second pass starts from the carried states
    bilm.reset_states()
    assert torch.equal(bilm(ids)[0][-1], first)
    stateless = ELMoBiLM.from_files(options_file, weights_file, stateful=False)
    assert torch.equal(stateless(ids)[0][-1], first) and torch.equal(stateless(ids)[0][-1], first)
    assert stateless.state_h.shape[2] == 0


def test_a_row_of_padding_alone_keeps_its_state(tmp_path):
    """bilm-tf: dynamic_rnn copies a row's state past its length, so a row of length 0 keeps it."""
    options_file, weights_file, _ = write_model(tmp_path, options())
    bilm = ELMoBiLM.from_files(options_file, weights_file)
    bilm(batch_to_ids(BATCHES[0]))
    kept_h, kept_c = bilm.state_h.clone(), bilm.state_c.clone()
    ids = batch_to_ids([["new", "words"], ["x"], ["y"]])
    ids[1] = 0  # row 1: padding alone
    layers, mask = bilm(ids)
    assert not mask[1].any() and all(layer[1].eq(0).all() for layer in layers)
    assert torch.equal(bilm.state_h[:, :, 1], kept_h[:, :, 1]) and torch.equal(bilm.state_c[:, :, 1], kept_c[:, :, 1])
    assert not torch.equal(bilm.state_h[:, :, 0], kept_h[:, :, 0])


# -- the fast path -------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, atol", [(torch.float32, 1e-6), (torch.float64, 1e-13)])
@pytest.mark.parametrize("projection", [True, False])
@pytest.mark.parametrize("cells", [5, 37])
def test_cpp_loop_matches_the_pytorch_loop(dtype, atol, projection, cells):
    """37 cells: the vectorised loop (8 or 16 lanes) and its scalar tail; 5: the tail alone."""
    torch.manual_seed(0)
    steps, batch, width = 7, 5, 4 if projection else cells
    gates = torch.randn(steps, batch, 4 * cells, dtype=dtype)
    # (scaled as a trained LSTM's: rounding differences then shrink from step to step, not grow)
    weight_hh = torch.randn(4 * cells, width, dtype=dtype) / width ** 0.5
    weight_proj = torch.randn(width, cells, dtype=dtype) / cells ** 0.5 if projection else None
    h0, c0 = torch.randn(batch, width, dtype=dtype), torch.randn(batch, cells, dtype=dtype)
    lengths = torch.tensor([7, 3, 0, 7, 1])
    for given in (lengths, None):
        kwargs = {"cell_clip": 0.3, "proj_clip": 0.1}
        plain = lstmp_recurrence_reference(gates, weight_hh, weight_proj, h0, c0, given, **kwargs)
        fast = lstmp_recurrence(gates, weight_hh, weight_proj, h0, c0, given, path=LSTMPPath.CPP, **kwargs)
        for a, b in zip(fast, plain, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=atol)
    assert fast[2].abs().max() == 0.3 and (fast[0].abs().max() == 0.1 or not projection)  # (both clip)


def test_explain_does_not_advance_a_stateful_biLM(tmp_path):
    """The states a stateful biLM carries are those of the user's last call after explain() as before it:
    the next call gives what it gives without explain() between."""
    options_file, weights_file, _ = write_model(tmp_path, options())
    ids = batch_to_ids(BATCHES[1])
    outputs = []
    for look in (False, True):
        bilm = ELMoBiLM.from_files(options_file, weights_file, stateful=True)
        with torch.no_grad():
            bilm(ids)
            if look:
                assert explain(bilm, ids)
            outputs.append(torch.stack(bilm(ids)[0]))
    assert torch.equal(*outputs)


def test_the_biLM_runs_the_cpp_loop_without_gradients_and_pytorch_with(tmp_path):
    options_file, weights_file, _ = write_model(tmp_path, options())
    bilm = ELMoBiLM.from_files(options_file, weights_file, stateful=False)
    ids = batch_to_ids(BATCHES[1])
    decisions = [d for d in explain(bilm, ids) if d.layer.startswith(("forward_layers", "backward_layers"))]
    assert len(decisions) == 4 and {d.path for d in decisions} == {LSTMPPath.CPP.value}
    with torch.no_grad():
        fast = bilm(ids)[0]
    bilm.requires_grad_(True)
    plain = bilm(ids)[0]
    plain[-1].sum().backward()
    assert bilm.forward_layers[0].weight_hh.grad is not None
    for a, b in zip(fast, plain, strict=True):
        torch.testing.assert_close(a, b.detach(), rtol=0, atol=1e-6)


def test_gradients_are_the_lstms_derivatives():
    torch.manual_seed(0)
    lstm = ProjectedLSTM(3, 2, 4, cell_clip=5.0, proj_clip=5.0, reverse=True, dtype=torch.float64)
    x = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True] * 4, [True, True, False, False]])
    assert torch.autograd.gradcheck(lambda v: lstm(v, mask)[0], (x,))


def test_compiled_biLM_matches_eager(tmp_path):
    """``torch.compile`` traces the whole biLM as one graph (no break: the checks that read values are
    left to eager calls, the recurrence takes the PyTorch operations) and computes what eager does,
    padding included. A tiny model, one layer, 4 steps a direction (compiling unrolls the loop), static
    shapes, and AOTAutograd without Inductor's code generation: what highwaynet's code decides under
    compile is all traced, and the C++ compilation of the unrolled loop's kernels, PyTorch's own
    business, took 80-110 s of a shared two-core machine (a fresh cache) where this takes seconds."""
    options_file, weights_file, _ = write_model(tmp_path, options(layers=1, highway=1, cells=8,
                                                                  filters=[[1, 4], [2, 4]]))
    bilm = ELMoBiLM.from_files(options_file, weights_file, stateful=False)
    ids = batch_to_ids([["a"], ["b", "c"]])
    eager = bilm(ids)[0]
    compiled = torch.compile(bilm, backend="aot_eager", fullgraph=True, dynamic=False)(ids)[0]
    for a, b in zip(compiled, eager, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_bfloat16_runs_close_to_float32(tmp_path):
    options_file, weights_file, _ = write_model(tmp_path, options())
    ids = batch_to_ids(BATCHES[0])
    full = ELMoBiLM.from_files(options_file, weights_file, stateful=False)(ids)[0][-1]
    half = ELMoBiLM.from_files(options_file, weights_file, stateful=False, dtype=torch.bfloat16)(ids)[0][-1]
    assert half.dtype == torch.bfloat16 and (half.float() - full).abs().max() < 0.1


# -- the word cache ----------------------------------------------------------------------------------

def test_cached_words_skip_the_character_encoder_and_give_the_same_vectors(tmp_path, monkeypatch):
    options_file, weights_file, _ = write_model(tmp_path, options())
    bilm = ELMoBiLM.from_files(options_file, weights_file, stateful=False)
    ids = batch_to_ids([["the", "cat", "the", "dog"], ["the", "cat"]])
    seen = []
    encode = bilm.token_encoder.forward
    monkeypatch.setattr(bilm.token_encoder, "forward", lambda rows: seen.append(rows.shape[0]) or encode(rows))
    plain = bilm(ids)[0]
    assert seen == [5]  # <S>, the, cat, dog, </S>: each distinct token once, of 10
    bilm.cache_words(["the", "cat", "<S>", "</S>"])
    seen.clear()
    cached = bilm(ids)[0]
    assert seen == [1]  # "dog" alone went through the encoder (repeats and cached words did not)
    for a, b in zip(cached, plain, strict=True):  # (float32: a batch of 1 word against 5 sums in another order,
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)  # which moves the last bit with the thread count)


# -- ELMo, the scalar mix -----------------------------------------------------------------------------

@pytest.mark.parametrize("layer_norm", [False, True])
def test_elmo_mixes_the_layers_as_bilm_tfs_weight_layers(tmp_path, layer_norm):
    options_file, weights_file, _ = write_model(tmp_path, options())
    elmo = ELMo.from_files(options_file, weights_file, 2, layer_norm=layer_norm, dropout=0.0, stateful=False)
    assert not any(p.requires_grad for p in elmo.bilm.parameters())
    assert all(p.requires_grad for p in elmo.mixes.parameters())
    with torch.no_grad():
        elmo.mixes[1].weights.copy_(torch.tensor([0.5, -1.0, 2.0]))
        elmo.mixes[1].gamma.fill_(1.5)
    ids = batch_to_ids(BATCHES[1])
    (first, second), mask = elmo(ids)
    layers, full_mask = elmo.bilm(ids)
    lengths = full_mask.sum(1)
    # bilm-tf's lm_embeddings: each layer without <S> and </S>, then weight_layers
    kept = np.zeros((2, ids.shape[1] - 2), dtype=bool)
    trimmed = []
    for layer in layers:
        out = np.zeros((2, ids.shape[1] - 2, layer.shape[-1]))
        for b, n in enumerate(lengths.tolist()):
            out[b, : n - 2] = layer[b, 1 : n - 1].double().numpy()
            kept[b, : n - 2] = True
        trimmed.append(out)
    assert np.array_equal(mask.numpy(), kept)
    for mix, got in ((np.array([0.0, 0.0, 0.0]), first), (np.array([0.5, -1.0, 2.0]), second)):
        shares = np.exp(mix) / np.exp(mix).sum()
        total = 0.0
        for share, layer in zip(shares, trimmed, strict=True):
            if layer_norm:  # one mean and variance over the batch's valid entries
                n = kept.sum() * layer.shape[-1]
                mean = (layer * kept[..., None]).sum() / n
                variance = (((layer - mean) * kept[..., None]) ** 2).sum() / n
                layer = (layer - mean) / np.sqrt(variance + 1e-12)
            total = total + share * layer
        gamma = 1.5 if mix[0] else 1.0
        _close(got[mask], gamma * total[kept], 1e-5)


def test_elmo_refuses_ids_without_sentence_boundaries(tmp_path):
    options_file, weights_file, _ = write_model(tmp_path, options())
    elmo = ELMo.from_files(options_file, weights_file, stateful=False)
    ids = batch_to_ids(BATCHES[1])[:, 1:]
    with pytest.raises(ValueError, match="must begin with <S> and end with </S>"):
        elmo(ids)


def test_scalar_mix_checks_its_input():
    with pytest.raises(ValueError, match="expects 3 tensors, got 2"):
        ScalarMix(3)([torch.ones(1, 2, 3)] * 2)
    with pytest.raises(ValueError, match="needs the mask"):
        ScalarMix(1, layer_norm=True)([torch.ones(1, 2, 3)])


def test_scalar_mix_layer_norm_of_a_batch_without_valid_entries_is_zeros():
    """A batch of padding alone has no statistics: the normalised layers are zeros, not the padding
    multiplied by 1/sqrt(1e-12)."""
    layers = [torch.full((2, 3, 4), 0.5), torch.full((2, 3, 4), -2.0)]
    mixed = ScalarMix(2, layer_norm=True)(layers, torch.zeros(2, 3, dtype=torch.bool))
    assert torch.equal(mixed, torch.zeros(2, 3, 4))
    # one valid entry: its normalised value is the reference's, the padding's too (unchanged behaviour)
    mask = torch.zeros(2, 3, dtype=torch.bool)
    mask[0, 0] = True
    layers = [torch.arange(24.0).reshape(2, 3, 4)]
    mixed = ScalarMix(1, layer_norm=True)(layers, mask)
    valid = layers[0][0, 0].double()
    expected = (layers[0].double() - valid.mean()) / torch.sqrt(valid.var(unbiased=False) + 1e-12)
    torch.testing.assert_close(mixed.double(), expected, rtol=1e-5, atol=1e-5)


# -- bad files -----------------------------------------------------------------------------------------

def test_a_file_that_is_not_an_elmo_file_names_the_missing_dataset(tmp_path):
    options_file, _, _ = write_model(tmp_path, options())
    other = tmp_path / "other.hdf5"
    with h5py.File(other, "w") as f:
        f.create_dataset("weights", data=np.zeros(3))
    with pytest.raises(ValueError, match="has no dataset 'char_embed'.*ELMo weights.hdf5"):
        ELMoBiLM.from_files(options_file, other)
    text = tmp_path / "text.hdf5"
    text.write_text("not hdf5")
    with pytest.raises(ValueError, match="not an ELMo weight file: not HDF5"):
        ELMoBiLM.from_files(options_file, text)
    with pytest.raises(FileNotFoundError, match="missing.hdf5 not found"):
        ELMoBiLM.from_files(options_file, tmp_path / "missing.hdf5")


def test_options_and_weights_that_disagree_name_the_dataset_and_shapes(tmp_path):
    _, weights_file, _ = write_model(tmp_path, options(cells=20))
    wider = tmp_path / "wider.json"
    wider.write_text(json.dumps(options(cells=24)))
    with pytest.raises(ValueError, match=r"'RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0' has shape \(12, 80\), but the "
                                         r"options give \(12, 96\) \(set by lstm.projection_dim and lstm.dim\)"):
        ELMoBiLM.from_files(wider, weights_file)
    three = tmp_path / "three.json"
    three.write_text(json.dumps(options(layers=3)))
    with pytest.raises(ValueError, match="has no dataset 'RNN_0/RNN/MultiRNNCell/Cell2/LSTMCell/W_0'"):
        ELMoBiLM.from_files(three, weights_file)


@pytest.mark.parametrize("text, words", [
    ("{not json", "not an ELMo options file: not JSON"),
    ("[" * 100_000 + "]" * 100_000, "not an ELMo options file: .*nested too deeply"),  # (it was a RecursionError)
    ('{"char_cnn": {}}', "has no 'lstm' section"),
    ('{"lstm": {}}', "no 'char_cnn' section"),
    (json.dumps({**options(), "lstm": {**options()["lstm"], "dim": "ten"}}), "'dim' must be int"),
    (json.dumps({**options(), "char_cnn": {**options()["char_cnn"], "activation": "gelu"}}), "'relu' or 'tanh'"),
])
def test_bad_options_files_say_what_is_wrong(tmp_path, text, words):
    path = tmp_path / "options.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=words):
        elmo_files.read_options(path)


def test_an_options_file_of_the_wrong_kind_says_so(tmp_path):
    weights = write_model(tmp_path, options())[1]
    with pytest.raises(ValueError, match=r"weights.hdf5 is not an ELMo options file: it is an HDF5 file \(a "
                                         r"weights.hdf5\? --options takes options.json"):  # (the two swapped)
        elmo_files.read_options(weights)
    path = tmp_path / "latin1.json"
    path.write_bytes('{"lstm": "é"}'.encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.json is not an ELMo options file: not JSON text \(.* is not "
                                         r"UTF-8 text: byte 10"):
        elmo_files.read_options(path)
    path.write_text(json.dumps({**options(), "lstm": {**options()["lstm"], "cell_clip": "3"}}))
    with pytest.raises(ValueError, match=r"'cell_clip' must be int or float, got '3'"):  # (not "(<class 'int'>, ...")
        elmo_files.read_options(path)


def test_an_options_file_with_a_clip_that_is_not_a_positive_number_is_named(tmp_path):
    for clip in (float("nan"), -1.0, 0, 10**400):  # (10**400: beyond any float, it was an OverflowError)
        path = tmp_path / "options.json"
        path.write_text(json.dumps({**options(), "lstm": {**options()["lstm"], "cell_clip": clip}}))
        with pytest.raises(ValueError, match=rf"{path} \[lstm\]: 'cell_clip' must be a positive finite number"):
            elmo_files.read_options(path)


@pytest.mark.parametrize("section, key, value, words", [
    ("char_cnn", "max_characters_per_token", 10**12, r"'max_characters_per_token' must be at most 10,000 \(ELMo's: "
                                                     r"50\), got 1,000,000,000,000"),
    ("char_cnn", "filters", [[1, 10**9]], r"the sum of the 'filters' counts must be at most 65,536 \(ELMo's: 2,048\)"),
    ("char_cnn", "filters", [[1, 8]] * 1001, r"the number of 'filters' must be at most 1,000"),
    ("char_cnn", "n_highway", 10**6, r"'n_highway' must be at most 100"),
    ("char_cnn", "embedding", {"dim": 10**9}, r"'embedding.dim' must be at most 65,536"),
    ("lstm", "dim", 10**9, r"'dim' must be at most 65,536 \(ELMo's: 1,024 to 4,096\)"),
    ("lstm", "n_layers", 10**5, r"'n_layers' must be at most 100"),
])
def test_an_absurd_size_in_an_options_file_is_named_not_allocated(tmp_path, section, key, value, words):
    """A size far beyond any published model's (an edit, a damaged file) is refused naming the file and the
    key, before anything is allocated (10**12 characters a token was an allocation error inside torch)."""
    opts = options()
    opts[section][key] = value
    path = tmp_path / "options.json"
    path.write_text(json.dumps(opts))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))} \[{section}\]: {words}.*put back the one that "
                                         rf"came with the weights$"):
        elmo_files.read_options(path)
    with pytest.raises(ValueError, match=rf"^options \[{section}\]: {words}"):
        ELMoBiLM.from_options(opts)
    opts = options()  # (the bounds are far from what a real model holds: ELMo's own sizes pass)
    opts["char_cnn"].update(max_characters_per_token=50, filters=[[1, 32], [2, 32], [3, 64], [4, 128], [5, 256],
                                                                  [6, 512], [7, 1024]], n_highway=2)
    opts["lstm"].update(projection_dim=512, dim=4096)
    assert elmo_files.read_options(opts).num_filters == 2048


@pytest.mark.parametrize("changes", [
    {"lstm": {"dim": 65_536, "projection_dim": 65_536}, "char_cnn": {"filters": [[1, 65_536]]}},  # (each in bounds)
    {"char_cnn": {"filters": [[10_000, 65_536]], "max_characters_per_token": 10_000, "embedding": {"dim": 65_536}}},
])
def test_sizes_each_within_bounds_but_absurd_together_are_refused_before_allocating(changes):
    """The bounds of each size allow trillions of parameters together: the sizes' parameter count is
    bounded too, refused naming it (it was an allocation error inside torch, or a machine's memory)."""
    opts = options()
    for section, values in changes.items():
        opts[section].update(values)
    with pytest.raises(ValueError, match=r"^options: its sizes make a biLM of [\d,]+ parameters, beyond the "
                                         r"4,294,967,296 read_options takes"):
        ELMoBiLM.from_options(opts)


@pytest.mark.parametrize("sizes", [{}, {"highway": 0, "layers": 3, "cells": 24, "char_dim": 5, "skip": False}])
def test_the_options_parameter_count_is_the_models(sizes):
    opts = options(**sizes)
    model = ELMoBiLM.from_options(opts, device="meta")
    assert elmo_files.read_options(opts).num_parameters == sum(p.numel() for p in model.parameters())


def test_a_weight_file_of_strings_is_named_as_damaged(tmp_path):
    options_file, weights_file, _ = write_model(tmp_path, options())
    with h5py.File(weights_file, "a") as f:
        shape = f["CNN/b_cnn_0"].shape
        del f["CNN/b_cnn_0"]
        f["CNN/b_cnn_0"] = np.array([b"a"] * shape[0])
    with pytest.raises(ValueError, match="dataset 'CNN/b_cnn_0' holds .* values, not numbers"):
        ELMoBiLM.from_files(options_file, weights_file)


def _external_link(f, name, tmp_path):
    """``name`` made an external link to a file of its own holding the same values."""
    with h5py.File(tmp_path / "elsewhere.h5", "w") as other:
        other["values"] = f[name][...]
    del f[name]
    f[name] = h5py.ExternalLink(str(tmp_path / "elsewhere.h5"), "/values")


def _external_storage(f, name, tmp_path):
    """``name``'s values moved into a raw file of their own (HDF5's external storage)."""
    values = f[name][...]
    values.tofile(tmp_path / "raw.bin")
    del f[name]
    f.create_dataset(name, values.shape, dtype=values.dtype, external=[(str(tmp_path / "raw.bin"), 0, values.nbytes)])


def _group_link(f, name, tmp_path):
    """``name``'s group (``CNN``) made a soft link to a copy of it."""
    f.copy("CNN", "CNN_copy")
    del f["CNN"]
    f["CNN"] = h5py.SoftLink("/CNN_copy")


@pytest.mark.parametrize("edit, words", [
    (lambda f, name, _: (f.__delitem__(name), f.__setitem__(name, h5py.SoftLink("/CNN/b_cnn_1"))),
     r"is a soft link \('CNN/b_cnn_2' to '/CNN/b_cnn_1'\)"),
    (_group_link, r"is a soft link \('CNN' to '/CNN_copy'\)"),
    (_external_link, r"is an external link \('CNN/b_cnn_2' to '/values' in the file '.*elsewhere.h5'\)"),
    (_external_storage, r"keeps its values in other files \(external or virtual storage\)"),
    (lambda f, name, _: (f.__delitem__(name), f.create_dataset(name, data=h5py.Empty("f4"))),
     r"holds no values \(an empty dataspace\)"),  # (it was a TypeError: 'NoneType' object is not iterable)
])
def test_a_weight_file_whose_values_are_not_in_its_datasets_is_refused(tmp_path, edit, words):
    """bilm-tf's files hold plain datasets. A link, or values kept in another file, were followed: data no
    sha256 of the weight file covers (``--sha256`` pins that file alone), and where the other file was gone
    an OSError from inside h5py; an empty dataspace was a TypeError."""
    options_file, weights_file, _ = write_model(tmp_path, options())
    with h5py.File(weights_file, "a") as f:
        edit(f, "CNN/b_cnn_2", tmp_path)
    with pytest.raises(ValueError, match=rf"weights.hdf5: dataset 'CNN/\w+' {words}.*the file was edited or is "
                                         r"damaged: use the weight file as published"):
        ELMoBiLM.from_files(options_file, weights_file)


def _damage_a_chunk(weights_file, arrays):
    """A gzip chunk's bytes flipped: h5py's OSError "filter returned failure during read"."""
    with h5py.File(weights_file, "a") as f:
        del f["char_embed"]
        chunk = f.create_dataset("char_embed", data=arrays["char_embed"], compression="gzip").id.get_chunk_info(0)
    data = bytearray(weights_file.read_bytes())
    for i in range(chunk.byte_offset + 10, chunk.byte_offset + 40):
        data[i] ^= 0xFF
    weights_file.write_bytes(bytes(data))


def _damage_a_type(weights_file, arrays):
    """A datatype message's character set made 2, which HDF5 does not define: h5py's TypeError "Unknown string
    encoding (value 2)" on reading the dataset's dtype (a bit flip the fuzzing of a weight file found)."""
    with h5py.File(weights_file, "a") as f:
        del f["char_embed"]
        f["char_embed"] = np.full(arrays["char_embed"].shape, b"x", dtype="S7")
    data = bytearray(weights_file.read_bytes())
    found = [m.start() for m in re.finditer(rb"\x13[\x00-\x02]\x00\x00\x07\x00\x00\x00", bytes(data))]
    assert len(found) == 1  # (the message of the 7-byte string type: version 1, class 3, then its size)
    data[found[0] + 1] |= 0x20
    weights_file.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [_damage_a_chunk, _damage_a_type])
def test_a_weight_file_damaged_inside_a_dataset_is_named_as_damaged(tmp_path, damage):
    options_file, weights_file, arrays = write_model(tmp_path, options())
    damage(weights_file, arrays)
    with pytest.raises(ValueError, match=r"weights.hdf5: dataset 'char_embed' cannot be read \(.*\): the file is "
                                         r"damaged; download it again"):
        ELMoBiLM.from_files(options_file, weights_file)


def test_a_weight_file_damaged_anywhere_loads_or_is_refused_as_damaged(tmp_path):
    """Bytes overwritten in the file's index (a third of the way in) were h5py's RuntimeError "decoded heap block
    address overflow" from inside the check for links; damage anywhere is a ValueError (or, in the values alone,
    a model that loads: HDF5 keeps no checksum of them)."""
    options_file, weights_file, _ = write_model(tmp_path, options())
    data = weights_file.read_bytes()
    rng = np.random.default_rng(0)
    damaged = tmp_path / "damaged.hdf5"
    for trial in range(40):
        copy = bytearray(data)
        start = len(data) // 3 if trial == 0 else int(rng.integers(len(data)))
        end = min(len(data), start + (2000 if trial == 0 else int(rng.integers(1, 64))))
        copy[start:end] = bytes(b ^ 0xFF for b in copy[start:end])
        damaged.write_bytes(bytes(copy))
        try:
            ELMoBiLM.from_files(options_file, damaged)
        except ValueError as error:
            assert str(damaged) in str(error)


def _small_bilm(**kwargs):
    return ELMoBiLM(4, 8, 1, filters=((1, 4), (2, 4)), num_highway=1, char_dim=4, **kwargs)


@pytest.mark.parametrize("call, error, words", [
    (lambda: _small_bilm(stateful="no"), TypeError, "stateful must be a bool"),
    (lambda: _small_bilm(skip_connections=None), TypeError, "skip_connections must be a bool"),
    (lambda: ELMoBiLM(4, 8, 1, filters=((1, 2.5), (1, 4))), TypeError, r"filters\[0\]\[1\] must be an int"),
    (lambda: ELMoBiLM(4, 8, 1, filters="ab"), TypeError, "filters must be a non-empty sequence"),
    (lambda: ELMoBiLM("4", 8, 1), TypeError, "projection_dim must be an int"),
    (lambda: ELMoBiLM(8, 4, 1, filters=((1, 8),)), ValueError, r"projection_dim \(8\) must not exceed cell_dim"),
    (lambda: ELMo(_small_bilm(), dropout="0.5"), TypeError, "dropout must be a real number"),
    (lambda: ELMo(_small_bilm(), layer_norm="yes"), TypeError, "layer_norm must be a bool"),
    (lambda: ScalarMix(2, trainable=None), TypeError, "trainable must be a bool"),
    (lambda: ScalarMix(2)([torch.randn(2, 3, 4), torch.randn(2, 3, 5)]), ValueError, "layers of one shape"),
    (lambda: ProjectedLSTM(4, 4, 8, forget_bias=float("nan")), ValueError, "forget_bias must be finite"),
    (lambda: ProjectedLSTM(4, 4, 8)(torch.randn(1, 2, 4, dtype=torch.float64)), TypeError, "expects x of dtype"),
    (lambda: ProjectedLSTM(4, 4, 8)(torch.randn(1, 2, 4), None, torch.zeros(1, 4)), TypeError,
     r"expects state to be a tuple \(h, c\)"),
    (lambda: batch_to_ids([["a"]], "50"), TypeError, "max_characters must be an int"),
    (lambda: _small_bilm().cache_words("abc"), TypeError, "wrap one word in a list"),
    (lambda: download_model("small", 5), TypeError, "data_dir must be a path"),
    # max_characters sizes every row: batch_to_ids([["a"]], 10**9) was a process killed for its memory
    (lambda: batch_to_ids([["a"]], 10_001), ValueError, r"max_characters must be at most 10,000 \(ELMo's: 50\)"),
    (lambda: word_to_ids("a", 10_001), ValueError, "max_characters must be at most 10,000"),
    (lambda: _small_bilm(max_characters=10_001), ValueError, "max_characters must be at most 10,000"),
    # sentence_to_ids checked nothing: an AttributeError, a str's characters taken as tokens, 2 ids a token
    (lambda: sentence_to_ids([1]), TypeError, "sentence_to_ids: in sentences, sentence 0, token 0 is a int"),
    (lambda: sentence_to_ids("abc"), TypeError, "sentence_to_ids takes tokens, a list of strings, got a str"),
    (lambda: sentence_to_ids(["a"], 2), ValueError, "max_characters must be at least 4"),
    (lambda: sentence_to_ids(["a"], "5"), TypeError, "max_characters must be an int"),
    (lambda: sentence_to_ids([]), ValueError, "sentence 0 is empty"),
    # cache_words: Python's own "'int' object is not iterable", "unhashable type: 'list'", no word named
    (lambda: _small_bilm().cache_words(5), TypeError, "words must be an iterable of words"),
    (lambda: _small_bilm().cache_words(["a", ["b"]]), TypeError, r"words\[1\] is list"),
    (lambda: _small_bilm().cache_words(["a", ""]), ValueError, r"words\[1\] is empty"),
    # save_files: 3 was pathlib's TypeError, a file errno 17 (and "": test_save_files_into_no_folder_...)
    (lambda: _small_bilm().save_files(3), TypeError, "folder must be a path"),
    (lambda: _small_bilm().save_files(__file__), FileExistsError, "is a file: pass a folder"),
])
def test_the_elmo_names_check_their_arguments_as_torch_nn_does(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_save_files_into_no_folder_is_refused_not_written_where_python_runs(tmp_path, monkeypatch):
    """``save_files("")`` wrote options.json and weights.hdf5 into the working folder."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="folder must be a path, got an empty string"):
        _small_bilm().save_files("")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("batch", [[], [["a", "b"]]])
def test_an_empty_batch_or_one_without_steps_gives_empty_layers(batch):
    bilm = _small_bilm()
    ids = batch_to_ids(batch) if batch else batch_to_ids([])
    layers, mask = bilm(ids)
    assert [tuple(t.shape) for t in layers] == [(len(batch), ids.shape[1], 8)] * 2 and mask.shape == ids.shape[:2]
    out, (h, c) = ProjectedLSTM(4, 3, 5)(torch.randn(len(batch), 0, 4))
    assert out.shape == (len(batch), 0, 3) and h.shape == (len(batch), 3) and not h.any()


def test_bad_ids_are_refused(tmp_path):
    options_file, weights_file, _ = write_model(tmp_path, options())
    bilm = ELMoBiLM.from_files(options_file, weights_file)
    with pytest.raises(ValueError, match=r"integer tensor \(B, T, 50\)"):
        bilm(torch.zeros(2, 3, 49, dtype=torch.long))
    with pytest.raises(ValueError, match="must lie in 0..261"):
        bilm(torch.full((1, 2, 50), 300))
    gap = batch_to_ids([["a", "b"]])
    gap[0, 1] = 0
    with pytest.raises(ValueError, match="padding .* between tokens"):
        bilm(gap)


# -- saving and the published models ------------------------------------------------------------------

def test_a_saved_biLM_loads_back_the_same(tmp_path):
    opts = options()
    options_file, weights_file, arrays = write_model(tmp_path, opts)
    bilm = ELMoBiLM.from_files(options_file, weights_file)
    assert bilm.save_files(tmp_path / "again") == (tmp_path / "again" / "options.json",
                                                  tmp_path / "again" / "weights.hdf5")
    with h5py.File(tmp_path / "again" / "weights.hdf5", "r") as f:
        for name, value in arrays.items():
            assert np.array_equal(f[name][...], value), name
    again = ELMoBiLM.from_files(tmp_path / "again" / "options.json", tmp_path / "again" / "weights.hdf5")
    assert all(torch.equal(a, b) for a, b in zip(bilm.state_dict().values(), again.state_dict().values(),
                                                 strict=True))


def test_save_files_writes_no_file_through_a_link_and_leaves_no_temporary(tmp_path):
    """A link planted where save_files writes (its old temporary ``weights.hdf5.tmp``, ``options.json``) was
    written through: h5py and ``write_text`` follow links, so a file elsewhere was overwritten."""
    folder, victim = tmp_path / "out", tmp_path / "victim.txt"
    folder.mkdir()
    victim.write_text("the user's own file")
    for name in ("weights.hdf5.tmp", "options.json"):
        (folder / name).symlink_to(victim)
    bilm = _small_bilm()
    bilm.save_files(folder)
    assert victim.read_text() == "the user's own file"
    assert not (folder / "options.json").is_symlink() and json.loads((folder / "options.json").read_text())
    assert sorted(p.name for p in folder.iterdir()) == ["options.json", "weights.hdf5", "weights.hdf5.tmp"]
    again = ELMoBiLM.from_files(folder / "options.json", folder / "weights.hdf5")
    assert all(torch.equal(a, b) for a, b in zip(bilm.state_dict().values(), again.state_dict().values(),
                                                 strict=True))


def _hidden(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.mark.skipif(sys.platform == "win32", reason="no fcntl: a save's folder is not locked there")
def test_a_killed_save_leaves_its_folder_to_the_next_save_and_one_under_way_keeps_it(tmp_path):
    """A save killed midway (SIGKILL, SIGTERM, a closed terminal) left its hidden folder (``.save_files.*``, with
    the weights it had written) for ever, one more for each such kill. The next save into the folder removes it;
    that of a save under way in another process (locked) stays, and that save ends as if alone."""
    import signal
    import subprocess

    from conftest import process_timeout

    import highwaynet

    folder = tmp_path / "out"
    _small_bilm().save_files(folder)
    script = ("import sys, time, types\n"
              "import highwaynet.elmo.bilm as bilm\n"
              "def stall(*args, **kwargs):\n"  # (mid-save: weights.hdf5 written in its folder, options.json not)
              "    print('saving', flush=True)\n"
              "    sys.stdin.readline()\n"
              "    return json.dumps(*args, **kwargs)\n"
              "json, bilm.json = bilm.json, types.SimpleNamespace(dumps=stall)\n"
              "bilm.ELMoBiLM(4, 8, 1, filters=((1, 4), (2, 4)), num_highway=1, char_dim=4).save_files(sys.argv[1])\n")
    env = {**os.environ, "PYTHONPATH": str(Path(highwaynet.__file__).parents[1])}

    def saving():
        writer = subprocess.Popen([sys.executable, "-c", script, str(folder)], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert writer.stdout.readline() == "saving\n"
        return writer

    writer = saving()
    try:
        under_way = _hidden(folder)
        assert len(under_way) == 1 and (folder / under_way[0] / "weights.hdf5").is_file()
        bilm = _small_bilm()
        bilm.save_files(folder)  # (meanwhile: the other's folder is left)
        assert _hidden(folder) == under_way
        assert torch.equal(ELMoBiLM.from_files(folder / "options.json", folder / "weights.hdf5").state_dict()[
            "token_encoder.projection.weight"], bilm.state_dict()["token_encoder.projection.weight"])
        writer.stdin.write("\n")
        writer.stdin.close()
        assert writer.wait(timeout=process_timeout(60)) == 0 and _hidden(folder) == []  # (it ended as if alone)
        writer = saving()
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=process_timeout(60))
        assert len(_hidden(folder)) == 1
        _small_bilm().save_files(folder)
        assert _hidden(folder) == [] and sorted(p.name for p in folder.iterdir()) == ["options.json", "weights.hdf5"]
    finally:
        writer.kill()
        writer.wait()


def _saved_pair(folder, *models):
    """Which of ``models`` the pair in ``folder`` is (its options and its weights both that model's), else None."""
    written = json.loads((folder / "options.json").read_text())
    for model in models:
        if written == model.options():
            loaded = ELMoBiLM.from_files(folder / "options.json", folder / "weights.hdf5")
            same = all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values(),
                                                         strict=True))
            return model if same else None
    return None


@pytest.mark.skipif(sys.platform == "win32", reason="no fcntl: a save's folder is not locked there")
@pytest.mark.parametrize("racer", ["save_files", "from_files"])
def test_a_save_racing_another_save_or_a_reading_leaves_and_gives_one_saves_pair(tmp_path, monkeypatch, racer):
    """A save moved its two files into place unlocked: a second save between its two moves (its weights moved,
    its options not yet) left the folder holding the first's options beside the second's weights, for good; a
    reading there read the new weights beside the old options (a shape error, or the wrong model read). The
    interleaving is forced: the first save stops after moving its weights, until the racer is done, or 2 s."""
    import threading

    folder = tmp_path / "out"
    first = _small_bilm()
    second = ELMoBiLM(4, 8, 1, filters=((1, 2), (2, 2)), num_highway=1, char_dim=4)  # (other sizes: a mix fails)
    second.save_files(folder)  # (what the folder holds before)
    moved_weights, racer_done, failed = threading.Event(), threading.Event(), []
    replace = os.replace

    def hooked(source, target, **kwargs):
        replace(source, target, **kwargs)
        if threading.current_thread() is saver and Path(target).name == "weights.hdf5":
            moved_weights.set()
            racer_done.wait(timeout=2)  # (unlocked, the racer ends meanwhile; locked, it waits for this save)

    def save():
        try:
            first.save_files(folder)
        except Exception as error:  # (raised in the main thread below)
            failed.append(error)
            moved_weights.set()

    monkeypatch.setattr(os, "replace", hooked)
    saver = threading.Thread(target=save)
    saver.start()
    try:
        assert moved_weights.wait(timeout=60) and not failed
        if racer == "save_files":
            second.save_files(folder)
        else:
            read = ELMoBiLM.from_files(folder / "options.json", folder / "weights.hdf5")
            assert read.options() == first.options()  # (the first save's moves over before it read)
            assert all(torch.equal(a, b) for a, b in zip(read.state_dict().values(), first.state_dict().values(),
                                                         strict=True))
    finally:
        racer_done.set()
        saver.join(timeout=60)
    assert not failed and not saver.is_alive()
    assert _saved_pair(folder, first, second) is (second if racer == "save_files" else first)
    assert _hidden(folder) == []


@pytest.mark.skipif(sys.platform == "win32", reason="no fcntl: a save's folder is not locked there")
def test_what_a_killed_save_left_is_told_from_a_users_folder_and_one_just_made(tmp_path):
    """The next save removes only a killed save's folder (unlocked, as ``mkdtemp`` makes it, holding its files and
    nothing else): one under way (locked), one not yet begun (empty), a look-alike name, and a folder of the user's
    (holding anything else, or open to others as a folder a user makes is, ``0755``) stay whole. The save took the
    weights out of a user's folder that held other files too, and removed a user's ``0755`` folder of a backup."""
    import fcntl

    folder = tmp_path / "out"
    killed, running, empty, other, mine, backup = (
        folder / f".save_files.{k}" for k in ("k1ll3d_x", "runn1ng_", "empty123", "a.b", "m1n3_abc", "old"))
    for scratch in (killed, running, empty, other, mine, backup):
        scratch.mkdir(parents=True, mode=0o755 if scratch == backup else 0o700)
    for scratch in (killed, running, other, mine, backup):
        (scratch / "weights.hdf5").write_bytes(b"half the weights")
    for scratch in (killed, backup):
        (scratch / "options.json").write_text("{}")
    (mine / "notes.txt").write_text("the user's own")
    lock = os.open(running, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _small_bilm().save_files(folder)
    finally:
        os.close(lock)
    assert _hidden(folder) == sorted(p.name for p in (running, empty, other, mine, backup))
    assert (running / "weights.hdf5").read_bytes() == b"half the weights"
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt", "weights.hdf5"]
    assert sorted(p.name for p in backup.iterdir()) == ["options.json", "weights.hdf5"]


def _obstacle(folder, monkeypatch, kind):
    """Put ``kind`` in the way of a save into ``folder``; the path it is at, and the words of its error."""
    if kind in ("weights.hdf5", "options.json"):
        (folder / kind).unlink()
        (folder / kind).mkdir()
        (folder / kind / "yours.txt").write_text("the user's own")
        return folder / kind, IsADirectoryError, "is a folder, where save_files writes the file .*: move or rename"
    if kind == "unwritable":
        folder.chmod(0o555)
        real = os.access
        if os.geteuid() == 0:  # (root writes anywhere: what the OS would say to another user)
            monkeypatch.setattr(os, "access", lambda path, mode, **kw: Path(path) != folder and real(path, mode, **kw))
        return folder, PermissionError, "is not writable by this user .*: save_files writes weights.hdf5 there"
    # another user's options.json in a folder, such as /tmp, where only a file's owner may replace it
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    folder.chmod(0o1777)
    for name, user in (("weights.hdf5", 1234), ("options.json", 4321)):  # (the folder: root's, as /tmp)
        os.chown(folder / name, user, user)
    monkeypatch.setattr(os, "geteuid", lambda: 1234)  # (root may replace it: what the OS says to user 1234)
    return folder / "options.json", PermissionError, r"belongs to another user \(uid 4321\).*sticky bit"


@pytest.mark.parametrize("kind", ["weights.hdf5", "options.json", "unwritable", "sticky"])
def test_save_files_checks_every_place_before_it_writes_or_moves_anything(tmp_path, monkeypatch, kind):
    """A save that failed between its two moves (``weights.hdf5`` a folder) left the new options.json beside
    the old weights, with an error that named its own hidden folder ("Is a directory:
    'OUT/.save_files.x1y2/weights.hdf5' -> 'OUT/weights.hdf5'"); a folder it could not write, or another
    user's file where only its owner may replace it, failed as bare. Each is refused, named with what to do,
    before anything is written: the files there stay as they were."""
    folder = tmp_path / "out"
    _small_bilm().save_files(folder)
    path, error, words = _obstacle(folder, monkeypatch, kind)
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    try:
        with pytest.raises(error, match=f"^{re.escape(str(path))} {words}.*nothing was changed"):
            ELMoBiLM(6, 8, 1, filters=((1, 4), (2, 4)), num_highway=1, char_dim=4).save_files(folder)
    finally:
        folder.chmod(0o755)
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before
    assert _hidden(folder) == []
    if kind in ("weights.hdf5", "options.json"):
        assert (folder / kind / "yours.txt").read_text() == "the user's own"


def test_where_options_json_is_new_so_are_the_weights(tmp_path, monkeypatch):
    """The two files are moved weights first, options.json (which says what the weights are) last: an OS
    failure between the two moves leaves the new weights beside the old options (a folder whose options.json
    is new holds the new weights too), and nothing of the save's own behind."""
    folder = tmp_path / "out"
    _small_bilm().save_files(folder)
    old = {name: (folder / name).read_bytes() for name in ("options.json", "weights.hdf5")}
    real, moves = os.replace, []

    def failing_second(source, target):
        moves.append(Path(target).name)
        if len(moves) == 2:
            raise OSError(5, "Input/output error")
        real(source, target)

    monkeypatch.setattr(os, "replace", failing_second)
    with pytest.raises(OSError, match="Input/output error"):
        ELMoBiLM(6, 8, 1, filters=((1, 4), (2, 4)), num_highway=1, char_dim=4).save_files(folder)
    assert moves == ["weights.hdf5", "options.json"]
    assert (folder / "options.json").read_bytes() == old["options.json"]
    assert (folder / "weights.hdf5").read_bytes() != old["weights.hdf5"] and _hidden(folder) == []


@pytest.fixture
def tiny_published(tmp_path, monkeypatch):
    """A published model "tiny" whose files are file:// URLs (no network), without a sha256 as the
    published ELMo and SeqVec files are; the files' sha256s."""
    options_file, weights_file, _ = write_model(tmp_path / "publisher", options())
    published = elmo_files.PublishedModel(
        elmo_files.DataFile("tiny/options.json", options_file.as_uri(), ""),
        elmo_files.DataFile("tiny/weights.hdf5", weights_file.as_uri(), ""), "a tiny model")
    monkeypatch.setitem(MODELS, "tiny", published)
    return tuple(hashlib.sha256(f.read_bytes()).hexdigest() for f in (options_file, weights_file))


def test_published_models_are_found_in_a_folder_or_downloaded_without_a_network(tmp_path, tiny_published):
    assert set(MODELS) - {"tiny"} == {"small", "medium", "original", "original-5.5b", "seqvec"}
    assert MODELS["original"].weights.url.endswith("2x4096_512_2048cnn_2xhighway/"
                                                    "elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5")
    assert all(not m.options.sha256 and not m.weights.sha256 for m in MODELS.values())  # (none published)
    (tmp_path / "data").mkdir()
    with pytest.raises(DataNotFoundError, match="tiny/options.json not found.*download=True"):
        download_model("tiny", tmp_path / "data")
    with pytest.warns(UncheckedDownloadWarning) as unchecked:
        got = download_model("tiny", tmp_path / "data", download=True)
    assert got == (tmp_path / "data" / "tiny" / "options.json", tmp_path / "data" / "tiny" / "weights.hdf5")
    # each file named with the sha256 it was found to have, and how to pin it
    assert [str(w.message).split(" was downloaded")[0] for w in unchecked] == [str(p) for p in got]
    for warning, digest in zip(unchecked, tiny_published, strict=True):
        assert f"Its sha256 is {digest};" in str(warning.message)
        assert "sha256=(OPTIONS, WEIGHTS)" in str(warning.message)
        assert "--sha256 OPTIONS WEIGHTS" in str(warning.message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert download_model("tiny", tmp_path / "data") == got  # found the second time, quietly
    ELMoBiLM.from_files(*got)
    with pytest.raises(ValueError, match="unknown ELMo model 'large'"):
        download_model("large")


def test_the_data_folder_is_checked_as_the_data_loaders_check_theirs(tmp_path, tiny_published, monkeypatch,
                                                                     capsys):
    """``data_dir`` (``elmo embed --data-dir``) that is a file is named as such (it said "looked in: afile"), and
    one that does not exist is refused, not passed over for the model in ``$HIGHWAYNET_DATA``: as the data
    loaders' (:func:`~highwaynet.data.download.search_folders`)."""
    from highwaynet.cli import main

    monkeypatch.setenv("HIGHWAYNET_DATA", str(tmp_path / "cache"))
    with pytest.warns(UncheckedDownloadWarning):
        download_model("tiny", tmp_path / "cache", download=True)  # (the model in the cache)
    (tmp_path / "afile").write_text("")
    with pytest.raises(DataNotFoundError, match=f"the data folder {tmp_path / 'afile'} is a file, not a folder"):
        download_model("tiny", tmp_path / "afile")
    with pytest.raises(DataNotFoundError, match=f"the data folder {tmp_path / 'mistyped'} does not exist"):
        download_model("tiny", tmp_path / "mistyped")
    assert download_model("tiny")[0] == tmp_path / "cache" / "tiny" / "options.json"  # (no folder given: the cache)
    assert main(["elmo", "embed", "--model", "tiny", "--data-dir", str(tmp_path / "mistyped"), "--input",
                 str(tmp_path / "afile"), "--out", str(tmp_path / "out.hdf5")]) == 2
    assert f"the data folder {tmp_path / 'mistyped'} does not exist" in capsys.readouterr().err


def test_a_pinned_sha256_checks_the_published_files(tmp_path, tiny_published):
    """``sha256=`` (``--sha256``): a download checked, quietly; a file that does not match, downloaded
    (then deleted) or found on disk, refused, naming both hashes."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = download_model("tiny", tmp_path / "data", download=True, sha256=tuple(h.upper() for h in tiny_published))
    assert all(p.is_file() for p in got)
    wrong = ("0" * 64, tiny_published[1])
    with pytest.raises(OSError, match=f"options.json does not match its sha256 \\(expected {'0' * 64}, got "
                                      f"{tiny_published[0]}\\)"):
        download_model("tiny", tmp_path / "data", sha256=wrong)
    with pytest.raises(OSError, match="does not match its sha256"):
        download_model("tiny", tmp_path / "fresh", download=True, sha256=wrong)
    assert not any(p.is_file() for p in (tmp_path / "fresh").rglob("*"))  # (nothing half-written left)
    for bad in ("0" * 64, ("0" * 64,), ("0" * 63, "0" * 64), ("g" * 64, "0" * 64)):
        with pytest.raises(ValueError, match="sha256 must be two sha256s"):
            download_model("tiny", tmp_path / "data", sha256=bad)


@pytest.mark.parametrize("name, millions", [("small", 13.6), ("medium", 28.0), ("original", 93.6)])
def test_the_published_sizes_have_the_parameters_their_publisher_gives(name, millions):
    sizes = {"small": (128, 1024, 1), "medium": (256, 2048, 1), "original": (512, 4096, 2)}[name]
    bilm = ELMoBiLM(sizes[0], sizes[1], 2, num_highway=sizes[2], device="meta")
    # (the embedding's row for id 0 is not the file's: bilm-tf prepends it)
    assert round((sum(p.numel() for p in bilm.parameters()) - bilm.char_dim) / 1e6, 1) == millions
