"""The character-level word encoder and its vocabulary, against the maths written out here in float64."""

import pytest
import torch
from torch.func import functional_call

from highwaynet.analysis import gate_modules
from highwaynet.models import CharAwareLanguageModel
from highwaynet.nn import CharCNNHighway, CharVocab
from highwaynet.nn.char import PRESETS

F64 = torch.float64


def written_out(encoder: CharCNNHighway, chars: torch.Tensor) -> torch.Tensor:
    """The encoder's maths, one word and one window at a time, in float64."""
    table = encoder.embedding.weight.detach().double()
    rows = []
    for word in chars:
        length = int((word != encoder.padding_idx).sum())
        word = list(word) + [encoder.padding_idx] * max(0, max(w for w, _ in encoder.filters) - len(word))
        feats = []
        for (width, _), conv in zip(encoder.filters, encoder.convs, strict=True):
            kernel, bias = conv.weight.detach().double(), conv.bias.detach().double()  # (count, dim, width)
            windows = (range(max(1, length - width + 1)) if encoder.pool == "word"  # inside the word, or the first
                       else range(len(word) - width + 1))  # "all": every window of the row
            values = []
            for start in windows:
                e = torch.stack([table[int(word[start + i])] for i in range(width)], dim=1)  # (dim, width)
                values.append(torch.tanh((kernel * e).sum((1, 2)) + bias))
            feats.append(torch.stack(values).max(0).values)
        y = torch.cat(feats)
        for proj in getattr(encoder.layers, "layers", []):  # y = T relu(H) + (1 - T) y
            z = proj.weight.detach().double() @ y + proj.bias.detach().double()
            h, t = torch.relu(z[:len(y)]), torch.sigmoid(z[len(y):])
            y = t * h + (1 - t) * y
        rows.append(y)
    return torch.stack(rows)


def test_the_encoder_is_its_maths():
    torch.manual_seed(0)
    vocab = CharVocab.from_words(["highway", "gates", "a", "carry"])
    encoder = CharCNNHighway(len(vocab), filters=((1, 3), (2, 4), (4, 5)), num_highway=2, char_dim=6).double()
    chars = vocab.encode(["highway", "a", "gates", "xyz"])  # 'a' and 'xyz' shorter than the widest filter
    torch.testing.assert_close(encoder(chars), written_out(encoder, chars), rtol=1e-12, atol=1e-12)


def test_pooling_over_every_window_is_elmos():
    """pool="all" (ELMo's encoder): every window of the row, padding included, then the activation."""
    torch.manual_seed(3)
    vocab = CharVocab.from_words(["highway", "gates", "a"])
    chars = vocab.encode(["highway", "a", "gates"], length=9)
    encoder = CharCNNHighway(len(vocab), filters=((1, 3), (2, 4), (4, 5)), num_highway=1, char_dim=6,
                             pool="all").double()
    torch.testing.assert_close(encoder(chars), written_out(encoder, chars), rtol=1e-12, atol=1e-12)
    by_word = CharCNNHighway(len(vocab), filters=((1, 3), (2, 4), (4, 5)), num_highway=1, char_dim=6).double()
    by_word.load_state_dict(encoder.state_dict())
    assert not torch.allclose(by_word(chars), encoder(chars))  # (padding reaches the "all" maxima)
    assert "pool='all'" in repr(encoder)
    with pytest.raises(ValueError, match="pool must be one of 'word', 'all', got 'every'"):
        CharCNNHighway(10, pool="every")


def test_gradients_check_in_float64():
    torch.manual_seed(1)
    vocab = CharVocab.from_words(["ab", "abc"])
    encoder = CharCNNHighway(len(vocab), filters=((1, 2), (3, 2)), num_highway=1, char_dim=3).double()
    chars = vocab.encode(["ab", "abc", "b"])
    names, params = zip(*[(n, p.detach().clone().requires_grad_()) for n, p in encoder.named_parameters()],
                        strict=True)
    # (a max is not differentiable where two windows tie: these random weights never tie)
    assert torch.autograd.gradcheck(lambda *p: functional_call(encoder, dict(zip(names, p, strict=True)),
                                                               (chars,)), params)


def test_padding_never_changes_a_words_vector():
    torch.manual_seed(2)
    vocab = CharVocab.from_words(["the", "highway", "of", "characters"])
    encoder = CharCNNHighway.preset("kim-small", len(vocab))
    words = ["the", "of", "highway", "characters"]
    tight = encoder(vocab.encode(words))
    loose = encoder(vocab.encode(words, length=30))  # far more padding
    alone = torch.cat([encoder(vocab.encode([w])) for w in words])  # each word in a batch of its own
    torch.testing.assert_close(loose, tight, rtol=0, atol=0)
    torch.testing.assert_close(alone, tight, rtol=1e-6, atol=1e-6)


def test_shapes_presets_and_the_mlp_comparison():
    vocab = CharVocab.from_words(["word"])
    for name, sizes in (("kim-small", 525), ("kim-large", 1100), ("elmo", 512)):
        encoder = CharCNNHighway.preset(name, len(vocab))
        assert encoder.output_size == sizes
        assert encoder(vocab.encode(["word"] * 6).view(2, 3, -1)).shape == (2, 3, sizes)
    assert sum(n for _, n in PRESETS["elmo"]["filters"]) == 2048
    mlp = CharCNNHighway.preset("kim-large", len(vocab), highway=False)
    assert not gate_modules(mlp) and len(gate_modules(CharCNNHighway.preset("kim-large", len(vocab)))) == 2
    assert CharCNNHighway.preset("kim-small", len(vocab), num_highway=0).output_size == 525
    with pytest.raises(ValueError, match="unknown preset 'kim-huge'"):
        CharCNNHighway.preset("kim-huge", 10)
    with pytest.raises(TypeError, match="expects chars to be an integer tensor"):
        CharCNNHighway(10)(torch.randn(2, 5))


def test_the_vocabulary_is_unicode_safe_cuts_long_words_and_marks_unknown_characters():
    vocab = CharVocab.from_words(["naïve", "日本語", "café"], max_word_length=6)
    ids = vocab.encode(["naïve", "日本", "zebra", "extraordinary"])
    assert ids.shape == (4, 6)
    assert ids[0].tolist() == [vocab.BOW, *(vocab.index[c] for c in "naïv"), vocab.EOW]  # cut to 4 characters
    assert ids[1, :4].tolist() == [vocab.BOW, vocab.index["日"], vocab.index["本"], vocab.EOW]
    assert ids[1, 4:].tolist() == [vocab.PAD, vocab.PAD]
    assert ids[2, 1].item() == vocab.UNK and ids[2, 2].item() == vocab.index["e"]
    again = CharVocab.from_state_dict(vocab.state_dict())
    assert torch.equal(again.encode(["café"]), vocab.encode(["café"])) and len(again) == len(vocab)
    with pytest.raises(ValueError, match="at least 3"):
        CharVocab("ab", max_word_length=2)


def test_export_and_compile_give_eagers_vectors():
    torch.manual_seed(3)
    vocab = CharVocab.from_words(["one", "two", "three"])
    encoder = CharCNNHighway.preset("kim-small", len(vocab)).eval()
    chars = vocab.encode(["one", "three", "two", "x"], length=9)
    batch = torch.export.Dim("batch", min=2)
    program = torch.export.export(encoder, (chars,), dynamic_shapes=({0: batch},))
    more = vocab.encode(["two", "one", "three"], length=9)
    torch.testing.assert_close(program.module()(more), encoder(more))
    torch.testing.assert_close(torch.compile(encoder, fullgraph=True)(chars), encoder(chars), rtol=1e-5, atol=1e-5)


def test_the_character_aware_language_model_reads_words_by_their_characters():
    torch.manual_seed(4)
    words = ["<unk>", "the", "cat", "sat", "on", "mat"]
    chars = CharVocab.from_words(words)
    for rnn in ("lstm", "rhn"):
        lm = CharAwareLanguageModel(chars.encode(words), len(chars), 16, rnn=rnn)
        tokens = torch.tensor([[1, 2], [2, 3], [3, 4]])
        logits, _ = lm(tokens)
        assert logits.shape == (3, 2, len(words))
        _, state = lm(tokens[:1])
        again, _ = lm(tokens[1:], state)  # the state carries the sequence on
        torch.testing.assert_close(again, logits[1:], rtol=1e-5, atol=1e-5)
    # a word's input is its characters': two words spelt alike (bar the vocabulary id) read alike
    twins = ["<unk>", "cat", "cat"]
    lm = CharAwareLanguageModel(chars.encode(twins), len(chars), 8).eval()
    x = lm.encoder(lm.word_chars[torch.tensor([1, 2])])
    torch.testing.assert_close(x[0], x[1])


def test_the_character_aware_language_model_refuses_what_its_lstm_cannot_take():
    words = CharVocab.from_words(["<unk>", "ab"])
    encoded = words.encode(["<unk>", "ab"])
    with pytest.raises(ValueError, match="state_dropout is the RHN's.*rnn='rhn'"):
        CharAwareLanguageModel(encoded, len(words), 8, state_dropout=0.2)
    with pytest.raises(TypeError, match="depth"):
        CharAwareLanguageModel(encoded, len(words), 8, depth=True)
    assert CharAwareLanguageModel(encoded, len(words), 8, rnn="rhn", state_dropout=0.2).rnn.state_dropout == 0.2
