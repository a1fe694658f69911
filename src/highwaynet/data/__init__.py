"""Data sets: images, sentence classification sets and text corpora. Every loader takes a folder,
and can download a missing file from its public source with a sha256 check."""

from .augment import RandomCropFlip
from .corpora import AUSTEN_NOVELS, NGRAM_CELLS, Corpus, load_corpus, tokenize_words
from .download import DataNotFoundError, default_data_dir
from .images import (
    IMAGE_DATASETS,
    ImageData,
    load_digits,
    load_fashion_mnist,
    load_image_data,
    load_mnist,
    load_mnist5k,
    read_idx,
)
from .sentences import SENTENCE_TASKS, SentenceData, encode_words, load_sentences, read_labelled

__all__ = [
    "AUSTEN_NOVELS",
    "Corpus",
    "DataNotFoundError",
    "IMAGE_DATASETS",
    "ImageData",
    "NGRAM_CELLS",
    "RandomCropFlip",
    "SENTENCE_TASKS",
    "SentenceData",
    "default_data_dir",
    "encode_words",
    "load_corpus",
    "load_digits",
    "load_fashion_mnist",
    "load_image_data",
    "load_mnist",
    "load_mnist5k",
    "load_sentences",
    "read_idx",
    "read_labelled",
    "tokenize_words",
]
