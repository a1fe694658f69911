"""The experiments: one file each, a config dataclass and a ``run()``."""
