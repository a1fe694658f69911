"""The experiments: one file each, a config dataclass and a ``run()``."""

from . import analyses  # noqa: F401  (makes the analyses the recipes write known to training.files)
