"""Training: the general :class:`Trainer` and the tasks it runs."""

from .checkpoint import CheckpointMismatch
from .classification import ClassificationTask
from .language_model import LanguageModelTask
from .run_dir import read_metrics
from .sentences import SentenceTask
from .trainer import CorruptCheckpoint, Task, TrainConfig, Trainer, TrainingDiverged, pick_device

__all__ = [
    "CheckpointMismatch",
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
