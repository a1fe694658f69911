"""The sentence-classification recipe's settings: one run (:class:`SentenceConfig`) and a sweep over
tasks, encoders, depths and seeds (:class:`SweepConfig`)."""

from __future__ import annotations

from dataclasses import dataclass

from ._fields import check_settings, setting
from .train import SEED_LIMIT, TrainConfig, check_monitor

__all__ = ["ENCODERS", "SENTENCE_TASKS", "SentenceConfig", "SweepConfig"]

#: The sentence sets known by name (any folder with train and test files works too).
SENTENCE_TASKS = ("sst1", "sst2", "mr", "subj", "trec")
#: The sentence encoders (:class:`highwaynet.models.SentenceClassifier`).
ENCODERS = ("hbilstm", "bilstm", "cnn", "cnn-highway")


@dataclass
class SentenceConfig:
    """One sentence-classification run: one encoder on one task, one seed (or cross-validation fold)."""

    task: str = setting("sst2", help="a known task or a folder of your own set (files train, test and optionally "
                                     "dev, 'LABEL sentence' lines)")
    encoder: str = setting("hbilstm", help="the sentence encoder", choices=ENCODERS)
    layers: int = setting(1, help="blocks in a (highway) BiLSTM stack", minimum=1)
    hidden: int = setting(150, help="LSTM size per direction", minimum=1)
    embed_dim: int = setting(300, help="word vector size", minimum=1)
    dropout: float = setting(0.5, help="dropout on the sentence vector and between blocks", minimum=0.0, below=1.0)
    embed_dropout: float = setting(0.0, help="dropout on the word vectors", minimum=0.0, below=1.0)
    resize: str = setting("projection", help="how a highway block's input reaches its width",
                          choices=("projection", "zeropad"))
    gate_bias: float = setting(-2.0, help="initial transform-gate bias of the highway layers")
    min_count: int = setting(1, help="words seen fewer times in training become <unk>", minimum=1)
    batch_size: int = setting(50, help="training batch size", minimum=1)
    fold: int = setting(0, help="the cross-validation fold tested (MR, Subj)", minimum=0, below=10)
    vectors: str | None = setting(None, help="word vectors in a text file (GloVe or word2vec text format)")
    word_features: str = setting("words", help="each word as its own vector, as its characters read by a CNN with "
                                               "highway layers, or both side by side (as BiDAF)",
                                 choices=("words", "chars", "words+chars"))
    char_encoder: str = setting("compact", help="the character encoder's preset (with characters)",
                                choices=("kim-small", "kim-large", "elmo", "compact"))
    adversarial: float = setting(0.0, help="adversarial training on the word vectors (Miyato et al., 2017): also "
                                           "train on each batch with its word vectors moved EPS times their own "
                                           "scale against the model; twice the time a step (0: off)",
                                 minimum=0.0, metavar="EPS")
    train: TrainConfig = setting(help="how to train", factory=lambda: TrainConfig(
        epochs=10, optimizer="adam", lr=1e-3, monitor="val_acc", grad_clip=5.0))

    def __post_init__(self) -> None:
        check_settings(self)
        check_monitor(self.train.monitor, ("loss", "acc"))
        if self.adversarial and self.train.compile:
            raise ValueError("adversarial training does not combine with compile (see highwaynet.training.adversarial)")
        if self.adversarial and self.word_features != "words":
            raise ValueError("adversarial training moves the word vectors: it needs word_features 'words'")


@dataclass
class SweepConfig:
    """Tasks x encoders x layer counts x seeds (x folds for MR and Subj); ``base`` sets the rest."""

    tasks: list[str] = setting(help="sst1, sst2, mr, subj, trec or folders of your own sets; all: the five",
                               factory=lambda: ["sst2"], flag="--task")
    encoders: list[str] = setting(help="sentence encoders", factory=lambda: ["bilstm", "hbilstm"], choices=ENCODERS,
                                  flag="--encoder")
    layers: list[int] = setting(help="stack depths", factory=lambda: [1, 2, 4, 6, 8, 10, 15, 20], minimum=1)
    seeds: list[int] = setting(help="seeds for SST and TREC", factory=lambda: [0, 1, 2], minimum=0, below=SEED_LIMIT)
    folds: int = setting(10, help="how many of the 10 cross-validation folds to run for MR and Subj",
                         minimum=1, below=11)
    base: SentenceConfig = setting(help="every run's settings", factory=SentenceConfig)

    def __post_init__(self) -> None:
        check_settings(self)
        if self.tasks == ["all"]:
            self.tasks = list(SENTENCE_TASKS)
        for task in self.tasks:
            if task not in SENTENCE_TASKS and not _a_folder(task):
                raise ValueError(f"unknown task {task!r}; expected one of {', '.join(SENTENCE_TASKS)}, or a folder "
                                 f"of your own set (files train, test and optionally dev; 'LABEL sentence' lines)")


def _a_folder(task: str) -> bool:
    """Whether ``task`` names a folder (``~/sentences`` the home's, as :func:`~highwaynet.data.load_sentences`
    reads it); imported here, not above, so that the settings alone cost no PyTorch import."""
    from .._checks import check_path

    return check_path("tasks", task).is_dir()
