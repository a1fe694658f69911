"""The command line is made from the recipes' configurations: no option of its own but where a run
goes and where data is, every default the configuration's, every check the configuration's."""

import argparse
import dataclasses
import subprocess
import sys

import pytest
from conftest import process_timeout

from highwaynet import cli, config

COMMANDS = [("train", r) for r in cli.TRAIN_RECIPES] + [("reproduce", r) for r in cli.REPRODUCE_RECIPES]
IDS = [f"{group} {recipe.name}" for group, recipe in COMMANDS]


def _subparser(group: str, name: str) -> argparse.ArgumentParser:
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    inner = next(a for a in commands.choices[group]._actions if isinstance(a, argparse._SubParsersAction))
    return inner.choices[name]


@pytest.mark.parametrize("group, recipe", COMMANDS, ids=IDS)
def test_no_options_give_the_recipes_default_configuration(group, recipe):
    args, settings = cli.parse([group, recipe.name])
    assert settings == recipe.config()
    assert type(settings) is recipe.config


def _fields(obj, prefix=""):
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        if dataclasses.is_dataclass(value):
            yield from _fields(value, prefix + field.name + ".")
        else:
            yield prefix + field.name


@pytest.mark.parametrize("group, recipe", COMMANDS, ids=IDS)
def test_every_option_is_a_setting_or_says_where_a_run_goes(group, recipe):
    parser = _subparser(group, recipe.name)
    settings = set(_fields(recipe.config()))
    shorthands = {"shorthand" + s.flag for s in recipe.shorthands}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.dest in settings or action.dest in cli.RUN_OPTIONS or action.dest in shorthands, action.dest
    # and every setting has an option, but those the command sets itself
    offered = {a.dest for a in parser._actions}
    assert settings - offered == set(recipe.hide)


def test_options_set_the_fields_they_name():
    _, mlp = cli.parse(["train", "mlp", "--depth", "10", "--lr", "0.5", "--no-plain", "--max-train", "100"])
    assert (mlp.depth, mlp.train.lr, mlp.plain, mlp.max_train) == (10, 0.5, False, 100)
    _, sweep = cli.parse(["reproduce", "sentences", "--task", "all", "--layers", "1,2", "--lr", "3e-4",
                          "--ema", "0.99"])
    assert sweep.tasks == list(config.SENTENCE_TASKS) and sweep.layers == [1, 2]
    assert (sweep.base.train.lr, sweep.base.train.ema) == (3e-4, 0.99)
    _, depth = cli.parse(["reproduce", "rhn-depth", "--no-lstm", "--no-cuda-graph", "--epochs", "2"])
    assert (depth.lstm, depth.cuda_graph, depth.base.train.epochs) == (False, False, 2)


def test_a_shorthand_sets_its_fields_and_an_own_option_wins():
    _, lm = cli.parse(["train", "lm", "--dropout", "0.3", "--state-dropout", "0.5"])
    assert (lm.input_dropout, lm.state_dropout, lm.output_dropout) == (0.3, 0.5, 0.3)


@pytest.mark.parametrize("argv, message", [
    (["train", "mlp", "--lr", "nan"], "--lr must be a finite number, got nan"),
    (["train", "mlp", "--dropout", "1"], "--dropout must be below 1.0, got 1.0"),
    (["train", "lm", "--dropout", "1.5"], "--input-dropout must be below 1.0, got 1.5"),
    (["reproduce", "sentences", "--folds", "11"], "--folds must be below 11, got 11"),
    (["reproduce", "sentences", "--encoder", "gru"], "--encoder must be one of"),
    (["reproduce", "rhn-depth", "--corpora", "austen"], "corpora entries are 'name:level'"),
    (["reproduce", "rhn-depth", "--seeds", "0,1,0"], "--seeds lists 0 more than once"),
    (["reproduce", "rhn-depth", "--seed", "3"], "the depth study trains each model with each of its seeds (--seeds)"),
])
def test_the_configurations_checks_name_the_option(argv, message, capsys):
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_help_imports_no_pytorch():
    """``highwaynet --help`` and each command's help answer without importing PyTorch
    (``benchmarks/import_time.py`` times them)."""
    code = ("import sys, contextlib, io\n"
            "from highwaynet import cli\n"
            "for argv in (['--help'], ['train', 'mlp', '--help'], ['reproduce', 'sentences', '--help']):\n"
            "    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "        cli.main(argv)\n"
            "print('torch' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=process_timeout(120))
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["False"]
