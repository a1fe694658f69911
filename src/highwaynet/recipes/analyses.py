"""The analyses the recipes write into a folder of their own (an ``analysis`` folder,
:mod:`highwaynet.training.files`), each made known there with the test that recognises its result
(:func:`~highwaynet.training.files.register_analysis`): ``reproduce gates`` and ``reproduce lesion``
(:mod:`highwaynet.recipes.gates`), and the setting chosen among sweeps (``reproduce sentences --choose-from``,
:func:`highwaynet.recipes.sentences.choose_setting`), whose ``summary.json`` is told from a sweep's by the
recipe it names (:data:`CHOICE_RECIPE`).

:mod:`highwaynet.recipes` imports this module, so that each analysis, and the ``report`` command, knows
all three (one folder holds one analysis: each refuses a folder holding another's ``report.md``).
"""

from __future__ import annotations

from pathlib import Path

from ..training import files

__all__ = ["CHOICE_RECIPE", "holds_a_choice"]

#: The recipe a setting chosen among sweeps names in its ``summary.json`` (a sweep's names its own recipe).
CHOICE_RECIPE = "sentences-choice"


def holds_a_choice(folder: Path) -> bool:
    """Whether ``folder`` holds a choice among sweeps' ``summary.json``: a regular file (not a link) holding a
    JSON object that names :data:`CHOICE_RECIPE`."""
    found = files.read_json_in(folder, "summary.json")
    return isinstance(found, dict) and found.get("recipe") == CHOICE_RECIPE


files.register_analysis("gates.json", "the gates' analysis")
files.register_analysis("lesion.json", "the lesion study")
files.register_analysis("summary.json", "the setting chosen among sweeps", holds=holds_a_choice,
                        evidence=f"summary.json naming {CHOICE_RECIPE}")
