"""Training: the general :class:`Trainer` and the tasks it runs."""

from .classification import ClassificationTask
from .language_model import LanguageModelTask
from .sentences import SentenceTask
from .trainer import CorruptCheckpoint, Task, TrainConfig, Trainer, TrainingDiverged, pick_device, read_metrics

__all__ = [
    "ClassificationTask",
    "CorruptCheckpoint",
    "LanguageModelTask",
    "SentenceTask",
    "Task",
    "TrainConfig",
    "Trainer",
    "TrainingDiverged",
    "pick_device",
    "read_metrics",
]
