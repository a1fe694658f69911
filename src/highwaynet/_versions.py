"""The installed libraries' versions, as numbers to compare: features here depend on a release."""

from __future__ import annotations

__all__ = ["release"]


def release(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a version string: ``"2.13.0+cpu"`` -> ``(2, 13)``."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)
