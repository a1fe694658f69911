"""Fast paths. Each names the plain-PyTorch reference it must match, and is tested against it."""

from .rhn_recurrence import rhn_recurrence

__all__ = ["rhn_recurrence"]
