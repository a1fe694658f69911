import pytest
import torch

from highwaynet.data import DataNotFoundError
from highwaynet.data.corpora import load_corpus, tokenize_words
from highwaynet.training.language_model import LanguageModelTask, batchify


def test_tiny_shakespeare_char_splits(shared_data):
    corpus = load_corpus("tinyshakespeare", "char", shared_data / "text")
    text = (shared_data / "text" / "tinyshakespeare.txt").read_text()
    assert len(corpus.train) + len(corpus.valid) + len(corpus.test) == len(text) == 1115394
    assert len(corpus.train) == int(0.9 * len(text))
    assert len(corpus.vocab) == 66  # 65 distinct characters and <unk>
    assert corpus.decode(corpus.train[:14]) == "First Citizen:"
    assert corpus.decode(corpus.test) == text[int(0.95 * len(text)):]  # every test character is known


def test_austen_word_level_splits_and_unk(shared_data):
    corpus = load_corpus("austen", "word", shared_data / "text", max_vocab=5000)
    assert len(corpus.vocab) == 5000 and corpus.vocab[0] == "<unk>"
    assert corpus.decode(corpus.train[:4]) == "emma\n\nby jane"  # Emma opens the training split
    # Validation is Northanger Abbey, test Persuasion: different novels.
    assert corpus.decode(corpus.valid[:2]) == "<unk> abbey"  # "northanger" is not in the training novels
    assert corpus.decode(corpus.test[:1]) == "persuasion"
    # Rare words are <unk> in training too, and the splits hold unknown words.
    assert 0 < (corpus.train == 0).float().mean() < (corpus.test == 0).float().mean() < 0.1
    assert 600_000 < len(corpus.train) < 800_000


def test_ptb_format_folder(tmp_path):
    (tmp_path / "train.txt").write_text(" the cat sat \n the dog sat \n")
    (tmp_path / "valid.txt").write_text(" the bird sat \n")
    (tmp_path / "test.txt").write_text(" a cat \n")
    corpus = load_corpus(str(tmp_path), "word")
    assert corpus.vocab == ["<unk>", "<eos>", "sat", "the", "cat", "dog"]  # by frequency, then name
    assert corpus.decode(corpus.valid) == "the <unk> sat\n\n"
    assert len(corpus.train) == 8  # 3 words and <eos>, twice


def test_missing_files(tmp_path):
    with pytest.raises(DataNotFoundError, match="tinyshakespeare.txt not found; looked in: .*--download"):
        load_corpus("tinyshakespeare", "char", tmp_path)
    with pytest.raises(DataNotFoundError, match="austen/emma.txt not found.*janeaustenr"):
        load_corpus("austen", "word", tmp_path)
    (tmp_path / "train.txt").write_text("a b\n")
    with pytest.raises(FileNotFoundError, match="valid.txt not found"):
        load_corpus(str(tmp_path), "word")
    with pytest.raises(ValueError, match="unknown corpus 'ptb'"):
        load_corpus("ptb", "word")
    with pytest.raises(ValueError, match="level must be"):
        load_corpus("austen", "sentence")


def test_tokenize_words():
    assert tokenize_words("Emma Woodhouse, handsome.\n\nShe wasn't.") == [
        "emma", "woodhouse", ",", "handsome", ".", "<eos>", "she", "wasn't", ".", "<eos>"]


def test_batchify_and_bptt_windows():
    ids = torch.arange(103)
    streams = batchify(ids, 4)
    assert streams.shape == (25, 4) and torch.equal(streams[:, 1], torch.arange(25, 50))

    class Tiny:
        level, train, valid, test = "char", torch.arange(1000), torch.arange(200), torch.arange(200)

    task = LanguageModelTask(Tiny(), batch_size=4, bptt=10, eval_batch_size=2)
    windows = list(task.batches("val", 0))
    assert all(torch.equal(y[:-1], x[1:]) for x, y in windows)  # targets are the next tokens
    assert sum(len(x) for x, _ in windows) == 99
    a, b = list(task.batches("train", 0)), list(task.batches("train", 1))
    assert not torch.equal(a[0][0], b[0][0])  # each epoch starts at its own offset
    assert torch.equal(a[0][0], list(task.batches("train", 0))[0][0])


@pytest.mark.parametrize("arguments, error, message", [
    ({"batch_size": 0}, ValueError, "batch_size must be positive, got 0"),
    ({"bptt": "10"}, TypeError, "bptt must be an int"),
    ({"eval_batch_size": 2.0}, TypeError, "eval_batch_size must be an int"),
    ({"seed": None}, TypeError, "seed must be an int"),
    ({"steps_per_epoch": 0}, ValueError, "steps_per_epoch must be positive"),
    ({"eval_windows": -1}, ValueError, "eval_windows must be positive"),
    ({"carry_state": "no"}, TypeError, "carry_state must be a bool"),
])
def test_language_model_task_arguments_are_checked_by_name(arguments, error, message):
    class Tiny:
        name, level, train, valid, test = "tiny", "char", torch.arange(1000), torch.arange(200), torch.arange(200)

    with pytest.raises(error, match=message):
        LanguageModelTask(Tiny(), **{"batch_size": 4, "bptt": 10, "eval_batch_size": 2, **arguments})


def _ngram_reference(train: list[int], scored: list[int], order: int, k: float, vocab: list[str]) -> float:
    """Add-k n-gram cross-entropy (nats per token) written out: counts of (context, token) on ``train``,
    each position of ``scored`` from its order-th token on (token ids: an unknown character is one)."""
    import math
    from collections import Counter

    grams = Counter(tuple(train[i:i + order]) for i in range(len(train) - order + 1))
    contexts = Counter()
    for gram, count in grams.items():
        contexts[gram[:-1]] += count
    total = 0.0
    positions = range(order - 1, len(scored))
    for i in positions:
        gram = tuple(scored[i - order + 1:i + 1])
        total -= math.log((grams[gram] + k) / (contexts[gram[:-1]] + k * len(vocab)))
    return total / len(positions)


@pytest.mark.parametrize("order", [1, 2, 3])
def test_ngram_nats_against_a_written_out_reference(tmp_path, order):
    (tmp_path / "train.txt").write_text("abracadabra cab acab, a bad cabbage\n" * 3)
    (tmp_path / "valid.txt").write_text("a cab bar, abba\n")
    (tmp_path / "test.txt").write_text("bad arcade cabs\n")
    corpus = load_corpus(str(tmp_path), "char")
    chars = {split: getattr(corpus, split).tolist() for split in ("train", "valid", "test")}
    assert 0 in chars["test"]  # ('s' is not in the training text: <unk>, scored as a token of its own)
    grid = (0.01, 0.1, 1.0)
    ks = {k: _ngram_reference(chars["train"], chars["valid"], order, k, corpus.vocab) for k in grid}
    chosen = min(grid, key=ks.get)  # on the validation split
    got = corpus.ngram_nats(order, "test", smoothing=grid)
    assert got["k"] == chosen
    assert got["nats"] == pytest.approx(_ngram_reference(chars["train"], chars["test"], order, chosen, corpus.vocab),
                                        rel=1e-12)
    assert corpus.ngram_nats(order, "valid", smoothing=grid)["nats"] == pytest.approx(ks[chosen], rel=1e-12)


def test_ngram_nats_checks_its_arguments(tmp_path):
    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.txt").write_text("some text\n")
    corpus = load_corpus(str(tmp_path), "char")
    with pytest.raises(ValueError, match="split must be one of"):
        corpus.ngram_nats(2, "train")
    with pytest.raises(ValueError, match="order must be"):
        corpus.ngram_nats(0)
    with pytest.raises(TypeError, match="order"):
        corpus.ngram_nats("2")
    with pytest.raises(ValueError, match="too many to count"):
        corpus.ngram_nats(12)


def test_ngram_nats_refuses_bad_smoothing_and_too_short_splits(tmp_path):
    (tmp_path / "train.txt").write_text("abcabc\n")
    (tmp_path / "valid.txt").write_text("a")
    (tmp_path / "test.txt").write_text("abc\n")
    corpus = load_corpus(str(tmp_path), "char")
    with pytest.raises(ValueError, match="the valid split has 1 tokens: an n-gram model of order 2 needs at least 2"):
        corpus.ngram_nats(2)
    assert corpus.ngram_nats(1)["nats"] > 0
    with pytest.raises(TypeError, match="smoothing must be a non-empty tuple"):
        corpus.ngram_nats(1, smoothing=())
    with pytest.raises(ValueError, match="smoothing must hold positive numbers, got -1"):
        corpus.ngram_nats(1, smoothing=(0.1, -1))
    with pytest.raises(ValueError, match="smoothing must be finite"):
        corpus.ngram_nats(1, smoothing=(float("nan"),))
    with pytest.raises(ValueError, match="split must be one of"):
        corpus.ngram_nats(1, "train")


@pytest.mark.parametrize("argument, value", [("download", "no"), ("download", None), ("data_dir", 5)])
def test_a_folders_download_and_data_dir_are_checked_as_a_known_corpus_is(tmp_path, argument, value):
    """load_corpus(folder, download="no") (or data_dir=5) was taken without a word; given a known corpus's name,
    the same call was a TypeError."""
    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.txt").write_text("a b c\n")
    with pytest.raises(TypeError, match=argument):
        load_corpus(tmp_path, "word", **{argument: value})
    load_corpus(tmp_path, "word", download=False, data_dir=tmp_path)
