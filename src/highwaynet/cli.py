"""The ``highwaynet`` command.

    highwaynet train mlp --data mnist5k --depth 50 --width 50 --epochs 10
    highwaynet reproduce depth --data mnist5k

Every ``train`` and ``reproduce`` option is a field of the recipe's configuration
(:mod:`highwaynet.config`), from which its default, help and checks come: the command line keeps no
settings of its own but where a run goes (``--out``, ``--resume``, ``--restart``) and where data is
(``--data-dir``, ``--download``). Building the parser imports no PyTorch, so that help is instant.

A command run again goes on with its folder: an unfinished run resumes, finished runs are skipped,
the report is written again; with other settings it is refused, naming each difference and the ways
on (``--restart`` starts the folder over; another ``--out`` keeps it). A command refused once it had
made its folder removes that folder again.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import __version__, config
from .config.options import ConfigOptions, Shorthand, add_config_options

EPILOG = ("Run folders hold config.json, metrics.jsonl, checkpoint.pt, model.pt and results.json. A command run "
          "again goes on where it stopped; --restart starts its folder over.")
DOWNLOAD_HELP = "download missing data files from their public source (sha256-checked)"

#: The options of train and reproduce commands that are not settings of the recipe: where the run
#: goes and where the data is, and what the command does with a finished one (report it, or choose
#: among finished sweeps).
RUN_OPTIONS = ("out", "resume", "restart", "data_dir", "download", "report_only", "choose_from")


@dataclass(frozen=True)
class Recipe:
    """A ``train`` or ``reproduce`` command: its configuration class, what to call, and its help."""

    name: str
    help: str
    description: str
    config: Callable[[], Any]
    run: Callable[[argparse.Namespace, Any], None]
    titles: dict[str, str]
    out: str | None = None  # the default --out, where the recipe has one name for it
    hide: tuple[str, ...] = ()
    shorthands: tuple[Shorthand, ...] = ()
    epilog: str | None = None
    resume_help: str = ("go on with the run in --out with the settings it was started with, whatever is asked (the "
                        "same command run again goes on by itself)")
    #: Options of the recipe's own among the run options (``group``), given the recipe (its default ``out``).
    extra: Callable[[argparse._ArgumentGroup, Recipe], None] = field(default=lambda group, recipe: None)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


_positive_int.__name__ = "integer"  # argparse's word for text int() rejects: "invalid integer value: 'x'"


def _path(text: str) -> str:
    """A file or folder option's path, ``~`` made the home folder as a shell does where it does not (in
    ``--out=~/runs``, or quoted): a folder literally named ``~`` is never made."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"must be a path, got {text!r}")
    return os.path.expanduser(text)


_path.__name__ = "path"


def _sha256(text: str) -> str:
    """A ``--sha256`` value, checked here so that the message names the option typed (not
    :func:`~highwaynet.elmo.download_model`'s argument, which checks it again for Python callers)."""
    if not re.fullmatch(r"[0-9a-fA-F]{64}", text):
        raise argparse.ArgumentTypeError(f"must be a sha256, 64 hexadecimal digits (as sha256sum prints), got "
                                         f"{text!r} ({len(text)} characters)")
    return text


def _seed(text: str) -> int:
    from .config.train import SEED_LIMIT

    value = int(text)
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"must be at least 0 and below {SEED_LIMIT}, got {text}")
    return value


_seed.__name__ = "integer"


def _add_run_options(parser: argparse.ArgumentParser, recipe: Recipe) -> None:
    run = parser.add_argument_group("run folder and data")
    out = f"(default: {recipe.out})" if recipe.out else "(default: runs/<a name from the settings>)"
    run.add_argument("--out", type=_path, default=recipe.out, help=f"the run folder {out}")
    run.add_argument("--resume", action="store_true", help=recipe.resume_help)
    what = "the run" if recipe.resume_help == Recipe.resume_help else "the study"
    run.add_argument("--restart", action="store_true",
                     help=f"start {what} in --out over, removing what highwaynet wrote there (a damaged checkpoint, "
                          f"say), the analyses of the weights before included (reproduce gates and lesion: "
                          f"RUN/gates, RUN/lesion); files of your own stay")
    run.add_argument("--data-dir", type=_path,
                     help="folder with the data files (default: $HIGHWAYNET_DATA, ~/.cache/highwaynet, and where "
                          "packages install them)")
    run.add_argument("--download", action="store_true", help=DOWNLOAD_HELP)
    recipe.extra(run, recipe)


def _add_recipe(commands: Any, recipe: Recipe) -> None:
    parser = commands.add_parser(recipe.name, help=recipe.help, description=recipe.description,
                                 epilog=recipe.epilog)
    options = add_config_options(parser, recipe.config(), titles=recipe.titles, hide=recipe.hide,
                                 shorthands=recipe.shorthands)
    _add_run_options(parser, recipe)
    parser.set_defaults(recipe=recipe, options=options)


# -- what each command runs ---------------------------------------------------------------------

@contextlib.contextmanager
def _say_what_runs(args: argparse.Namespace, out: str, config: Any, recipe: str, new_run: str) -> Iterator[None]:
    """Hold the run folder (:func:`~highwaynet.training.run_dir.hold_run_dir`) for the block, saying first what
    the command does with it (:func:`~highwaynet.training.run_dir.plan_run`), once it is taken (its own, no other
    process writing it): ``new_run`` for a new run (or one started over); for a run that goes on, the Trainer's
    line says so (resumed after which epoch, or finished); with ``--resume``, the settings asked that it does not
    take."""
    from .training.run_dir import hold_run_dir, plan_run

    plan = plan_run(out, recipe, config, resume=args.resume, restart=args.restart)
    with hold_run_dir(out):
        if plan.action == "new":
            print(new_run)
        elif plan.action == "restart":
            print(f"{new_run} (started over: --restart)" if plan.held else new_run)
        if plan.not_applied:
            print("--resume goes on with the settings the run was started with; not applied: "
                  + ", ".join(plan.not_applied))
        yield


def _check_resume(args: argparse.Namespace) -> None:
    if args.resume and not args.out:
        raise ValueError("--resume needs --out, the run folder to continue")


def _run_image_recipe(args: argparse.Namespace, config: Any, what: str) -> None:
    from .recipes import cnn, mlp

    _check_resume(args)
    kind = "plain" if config.plain else "highway"
    out = args.out or f"runs/{what}-{config.data}-{kind}{config.depth}-seed{config.train.seed}"
    run = mlp.run if what == "mlp" else cnn.run
    with _say_what_runs(args, out, config, what,
                        f"training a {config.depth}-layer {kind} {what.upper()} on {config.data}; run folder: {out}"):
        results = run(config, out, resume=args.resume, restart=args.restart, data_dir=args.data_dir,
                      download=args.download)
    print(f"test_loss {results['test']['loss']:.4f}  test_acc {results['test']['acc']:.4f}  "
          f"({results['parameters']:,} parameters, {results['seconds']:.1f}s on {results['device']})")


def _train_mlp(args: argparse.Namespace, config: Any) -> None:
    _run_image_recipe(args, config, "mlp")


def _train_cnn(args: argparse.Namespace, config: Any) -> None:
    _run_image_recipe(args, config, "cnn")


def _train_lm(args: argparse.Namespace, config: Any) -> None:
    from .recipes import lm

    _check_resume(args)
    name, what = lm_name(config)
    corpus = config.corpus.rstrip("/").split("/")[-1]
    out = args.out or f"runs/lm-{corpus}-{config.level}-{name}-seed{config.train.seed}"
    with _say_what_runs(args, out, config, "lm",
                        f"training {what} on {config.corpus} ({config.level} level); run folder: {out}"):
        results = lm.run(config, out, resume=args.resume, restart=args.restart, data_dir=args.data_dir,
                         download=args.download)
    key = "bpc" if config.level == "char" else "ppl"
    print(f"test_loss {results['test']['loss']:.4f}  test_{key} {results['test'][key]:.4f}  "
          f"({results['parameters']:,} parameters, {results['seconds']:.1f}s on {results['device']})")
    print(results["sample"])


def lm_name(config: Any) -> tuple[str, str]:
    """A language model's name in its default run folder, and in words: ``rhn-depth4`` / "an RHN language
    model (recurrence depth 4)"; ``lstm``; ``transformer-pre-highway-6`` / "a 6-block pre-LN highway
    Transformer language model": the model that trains, so that runs of different models never share a
    folder."""
    chars = "-chars" if config.input == "chars" else ""
    reading = ", reading words by their characters" if config.input == "chars" else ""
    if config.model == "rhn":
        return f"rhn-depth{config.depth}{chars}", f"an RHN language model (recurrence depth {config.depth}{reading})"
    if config.model == "transformer":
        norm = {"pre": "pre-LN", "post": "post-LN", "none": "LayerNorm-free"}.get(config.norm, config.norm)
        return (f"transformer-{config.norm}-{config.residual}-{config.layers}",
                f"a {config.layers}-block {norm} {config.residual} Transformer language model")
    layers = f"{config.layers}-layer " if config.layers > 1 else ""
    return (f"lstm{config.layers if config.layers > 1 else ''}{chars}",
            f"a{'n' if not layers else ''} {layers}LSTM language model" + (f" ({reading[2:]})" if reading else ""))


def _reproduce_depth(args: argparse.Namespace, config: Any) -> None:
    from .recipes import depth
    from .training.run_dir import format_mean_std

    out = args.out or f"runs/depth-{config.data}"
    summary = depth.run(config, out, resume=args.resume, restart=args.restart, data_dir=args.data_dir,
                        download=args.download)
    for net in summary["nets"]:
        print(f"{net['depth']:4} layers {net['kind']:8} lr {net['lr']:<5g} train loss "
              f"{format_mean_std(net['train_loss'], len(net['curves']), 4)}  test acc "
              f"{format_mean_std(net['test_acc'], len(net['curves']), 2)}%")
    print(f"wrote {out}/report.md and {out}/depth.png ({summary['seconds']:.0f}s)")


def _reproduce_rhn_depth(args: argparse.Namespace, config: Any) -> None:
    from .recipes import rhn_depth

    summary = rhn_depth.run(config, args.out, resume=args.resume, restart=args.restart, data_dir=args.data_dir,
                            download=args.download)
    figure = "tuning.png" if config.tune else "depth.png"
    print(f"wrote {args.out}/report.md and {args.out}/{figure} ({summary['seconds']:.0f}s)")


def _reproduce_char_lm(args: argparse.Namespace, config: Any) -> None:
    from .recipes import char_lm
    from .training.run_dir import format_mean_std

    summary = char_lm.run(config, args.out, resume=args.resume, restart=args.restart, data_dir=args.data_dir,
                          download=args.download)
    for row in summary["rows"]:
        print(f"{row['model']:18} {row['parameters']:>10,} parameters  test perplexity "
              f"{format_mean_std(row['test_ppl'], len(row['test_ppl']['values']))}")
    print(f"wrote {args.out}/report.md and {args.out}/char-lm.png ({summary['seconds']:.0f}s)")


def _reproduce_sentences(args: argparse.Namespace, config: Any) -> None:
    from .models.sentence import STACKED_ENCODERS
    from .recipes import sentences, sentences_report
    from .training.run_dir import count, format_mean_std

    if args.choose_from:  # (a folder of its own: by default not the sweeps' default folder, which it would not take)
        unread = args.options.given(args) + [f"--{name.replace('_', '-')}"
                                             for name in ("resume", "restart", "report_only") if getattr(args, name)]
        if unread:  # (--task trec, say, would leave the choice on every task its sweeps ran, without a word)
            raise ValueError(f"--choose-from trains nothing and reads every task, encoder, depth and seed its sweeps "
                             f"ran, as they ran them: {', '.join(unread)} would not be read; leave "
                             f"{'it' if len(unread) == 1 else 'them'} out (--out, --data-dir and --download are read)")
        out = _choice_out(args.recipe) if args.out == _path(args.recipe.out) else args.out
        chosen = sentences.choose_setting(args.choose_from, out, data_dir=args.data_dir, download=args.download)
        for line in sentences_report.choice_verdicts(chosen):
            print(line)
        print(f"wrote {out}/report.md")
        return
    summary = sentences.sweep(config, args.out, resume=args.resume, restart=args.restart, data_dir=args.data_dir,
                              download=args.download, report_only=args.report_only)
    for row in summary["table"]:
        depth = count(row["layers"], "layer") if row["encoder"] in STACKED_ENCODERS else "-"
        print(f"{row['task']:5} {row['encoder']:12} {depth:>10}  "
              f"{format_mean_std(row, row['runs'])}% ({count(row['runs'], 'run')})")
    if summary.get("left_out"):
        print(f"partial: {count(len(summary['left_out']), 'run')} left out, unfinished at the sweep's end "
              f"(named above): run the same command again once it has ended")
    print(f"wrote {args.out}/report.md ({summary['seconds']:.0f}s)")


def _reproduce_transformer_depth(args: argparse.Namespace, config: Any) -> None:
    from .recipes import transformer_depth

    summary = transformer_depth.run(config, args.out, resume=args.resume, restart=args.restart,
                                    data_dir=args.data_dir, download=args.download)
    by_variant = {(c["a"], c["a_depth"]): c for c in summary["contrasts"] if c["kind"] == "vs pre-LN sum"}
    for row in summary["rows"]:
        contrast = by_variant.get((row["variant"], row["depth"]))
        print(f"{row['depth']:3} blocks  {row['variant']:29} lr {row['lr']:<7g} test loss "
              f"{transformer_depth._mean_sd(row)}"
              + (f"  vs pre-residual {transformer_depth._interval(contrast)}: {contrast['verdict']}" if contrast
                 else ""))
    print(f"wrote {args.out}/report.md and {args.out}/depth.png ({summary['seconds']:.0f}s)")


def _report_only(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--report-only", action="store_true",
                       help="train nothing: report the runs already finished in --out (a sweep split over "
                            "several processes, each running the same command)")


def _choice_out(recipe: Recipe) -> str:
    """Where a choice among sweeps (``--choose-from``) writes without ``--out``: a folder of its own beside the
    sweeps' default one, read from the recipe (its one source), which the choice would not take."""
    return f"{recipe.out}-choice"


def _sentence_choice(group: argparse._ArgumentGroup, recipe: Recipe) -> None:
    _report_only(group)
    group.add_argument("--choose-from", type=_labelled_folders, metavar="LABEL=FOLDER,...",
                       help="train nothing: choose the highway BiLSTM's setting on each task among these finished "
                            "sweeps by mean best validation accuracy, test it against their cnn (its setting chosen "
                            "the same way where they ran it at several) paired by seed, "
                            f"and write summary.json and report.md into --out (by default {_choice_out(recipe)}), "
                            "a folder of its own")


def _labelled_folders(text: str) -> dict[str, str]:
    """``{"defaults": "runs/a", "wide": "runs/b"}`` from ``defaults=runs/a,wide=runs/b`` (spaces around a
    label or a folder dropped: ``defaults=runs/a, wide=runs/b`` is the same)."""
    pairs = [tuple(x.strip() for x in part.partition("=")) for part in text.split(",")]
    if any(not label or not sep or not folder.strip() for label, sep, folder in pairs):
        raise argparse.ArgumentTypeError(f"expected LABEL=FOLDER, comma-separated, got {text!r}")
    if len({label for label, _, _ in pairs}) < len(pairs):
        raise argparse.ArgumentTypeError(f"each label once, got {text!r}")
    return {label: _path(folder) for label, _, folder in pairs}


TRAINING = {"train": "training", "base.train": "training (every run)"}
STUDY_RESUME = ("go on with the study in --out with the settings it was started with, whatever is asked: finished "
                "runs skipped, unfinished ones resumed (the same command run again goes on by itself)")

TRAIN_RECIPES = (
    Recipe("mlp", help="a deep highway (or plain) fully connected network on images",
           description="A deep fully connected classifier on images: one plain layer to the width, then "
                       "depth-1 highway layers (or, with --plain, depth plain layers), then softmax. "
                       "Prints one line per epoch and writes a run folder.",
           epilog="example: highwaynet train mlp --data mnist5k --depth 50 --width 50 --epochs 10",
           config=config.MLPConfig, run=_train_mlp, titles={"": "model and data", **TRAINING}),
    Recipe("cnn", help="a convolutional highway (or plain) network on images, with crops and flips",
           description="A convolutional classifier: per stage a 3x3 convolution to the stage's width, then "
                       "highway convolutions (or, with --plain, plain conv-BN-ReLU layers), then 2x2 max-pooling; "
                       "global average pooling and a linear classifier. Trains with random crops and flips.",
           epilog="example: highwaynet train cnn --data fashion-mnist --epochs 30",
           config=config.CNNConfig, run=_train_cnn, titles={"": "model and data", **TRAINING}),
    Recipe("lm", help="a character- or word-level language model, RHN or LSTM",
           description="A language model on a text corpus: embedding, a Recurrent Highway Network (or an LSTM), "
                       "a decoder tied to the embedding. Reports bits per character (char) or perplexity (word).",
           epilog="example: highwaynet train lm --corpus austen --level word --model rhn --depth 5 "
                  "--data-dir ../shared/data/text",
           config=config.LMConfig, run=_train_lm, titles={"": "corpus and model", **TRAINING},
           shorthands=(Shorthand("--dropout", ("input_dropout", "state_dropout", "output_dropout"),
                                 "set the three variational dropouts at once (each own option wins)"),)),
)

REPRODUCE_RECIPES = (
    Recipe("depth", help="plain vs highway MLPs at 10/20/50/100 layers (Training Very Deep Networks, Fig. 1)",
           description="Plain (71 wide) and highway (50 wide) MLPs at each depth, He initialisation, SGD with "
                       "momentum; a learning-rate search per net (the first seed at every rate), then more seeds. "
                       "Writes depth.png and report.md.",
           epilog="example: highwaynet reproduce depth --data fashion-mnist --max-train 10000",
           config=config.DepthConfig, run=_reproduce_depth, titles={"": "experiment"},
           resume_help=STUDY_RESUME),
    Recipe("rhn-depth", help="RHN language models against recurrence depth at a fixed budget, and vs an LSTM",
           description="RHN language models at several recurrence depths with the parameter budget fixed, each with "
                       "every seed; the best depth on validation then against LSTMs of the same budget and seeds, "
                       "trained for the same time and for the same steps, and both families on the equal-time LSTM's "
                       "schedule for the same steps (paired differences, 95% intervals). Writes "
                       "depth.png and report.md.",
           config=config.RHNDepthConfig, run=_reproduce_rhn_depth, out="runs/rhn-depth",
           titles={"": "experiment", "base": "every model", **TRAINING},
           hide=("base.corpus", "base.level", "base.model", "base.depth", "base.hidden", "base.train.cuda_graph"),
           shorthands=(Shorthand("--dropout", ("base.input_dropout", "base.state_dropout", "base.output_dropout"),
                                 "set the three variational dropouts at once (each own option wins)"),),
           resume_help=STUDY_RESUME),
    Recipe("char-lm", help="character-aware language models: highway vs MLP layers vs words (Kim et al., 2016)",
           description="Word-level language models that read each word by its characters (a CNN, then 0, 1 or 2 "
                       "highway layers, or MLP layers in their place) against a word-level LSTM, all of about the "
                       "same parameters, several seeds. Writes char-lm.png and report.md.",
           epilog="example: highwaynet reproduce char-lm --data-dir ../shared/data/text",
           config=config.CharLMConfig, run=_reproduce_char_lm, out="runs/char-lm",
           titles={"": "experiment", "base": "every model", **TRAINING},
           hide=("base.corpus", "base.level", "base.input", "base.char_layers", "base.char_mlp", "base.hidden",
                 "base.train.seed", "base.tie_weights"),
           shorthands=(Shorthand("--dropout", ("base.input_dropout", "base.state_dropout", "base.output_dropout"),
                                 "set the three variational dropouts at once (each own option wins)"),),
           resume_help=STUDY_RESUME),
    Recipe("transformer-depth", help="the residual family (gates, scales, their controls) in Transformers of 2 to "
                                     "32 blocks",
           description="Causal character-level Transformers on Tiny Shakespeare at several depths, in each variant "
                       "NORM-KIND (LayerNorms pre, post or none; a plain sum, a fixed gate, ReZero's scalar, "
                       "LayerScale, DeepNorm, highway or GTrXL gates; a final LayerNorm; plain models widened to a "
                       "gated one's parameters), the same optimiser and no warm-up; a learning-rate search per depth "
                       "and variant on its own seed, then more seeds tested on the test split, and paired intervals "
                       "for the pre-registered contrasts. Writes depth.png, gates.png and report.md.",
           epilog="example: highwaynet reproduce transformer-depth --download (--full: nanoGPT's baby GPT, on a GPU). "
                  "Time: the default took 41 minutes on a 2-core CPU (392 runs, 2 side by side); a run stopped goes "
                  "on when run again.",
           config=config.TransformerDepthConfig, run=_reproduce_transformer_depth, out="runs/transformer-depth",
           titles={"": "experiment", "base": "every model", **TRAINING},
           hide=("base.level", "base.model", "base.depth", "base.layers", "base.residual", "base.norm", "base.input",
                 "base.char_encoder", "base.char_layers", "base.char_mlp", "base.state_dropout", "base.train.lr",
                 "base.train.seed", "base.train.warmup_steps", "base.train.nonfinite", "base.final_norm",
                 "base.mlp_hidden", "base.gate_bias"),
           shorthands=(Shorthand("--dropout", ("base.input_dropout", "base.output_dropout"),
                                 "set the embeddings' and the blocks' dropout at once (each own option wins)"),),
           resume_help=STUDY_RESUME),
    Recipe("sentences", help="sentence classification: HBiLSTM vs BiLSTM stacks by depth, and Kim's CNN",
           description="Sentence classification on SST-1, SST-2, MR, Subj and TREC: highway BiLSTM stacks against "
                       "plain BiLSTM stacks of each depth, Kim's CNN and Kim's CNN with highway layers. Several "
                       "seeds (10-fold cross-validation for MR and Subj). Writes report.md and depth-<task>.png.",
           epilog="example: highwaynet reproduce sentences --task trec --encoder hbilstm --layers 1 "
                  "--gate-bias 0 --hidden 300 --ema 0.995",
           config=config.SweepConfig, run=_reproduce_sentences, out="runs/sentences",
           titles={"": "sweep", "base": "every run", **TRAINING},
           hide=("base.task", "base.encoder", "base.layers", "base.fold", "base.train.seed"),
           resume_help=STUDY_RESUME, extra=_sentence_choice),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="highwaynet", description="Highway Networks: train the layers, rerun the papers' experiments.",
        epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"highwaynet {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = commands.add_parser("train", help="train one model", description="Train one model.")
    models = train.add_subparsers(dest="subcommand", required=True, metavar="MODEL")
    for recipe in TRAIN_RECIPES:
        _add_recipe(models, recipe)

    gen = commands.add_parser("generate", help="sample text from a trained language model",
                              description="Sample text from a language model's run folder (its best weights), "
                                          "printed as it is made.")
    gen.add_argument("run_dir", type=_path, metavar="RUN_DIR")
    gen.add_argument("--prompt", default="\n", help="text to start from (default: a new line)")
    gen.add_argument("--length", type=_positive_int, default=200, help="tokens to sample (default: %(default)s)")
    gen.add_argument("--temperature", type=float, default=0.8,
                     help="below 1 sharper, above 1 flatter; 0: the likeliest token each step (default: %(default)s)")
    gen.add_argument("--seed", type=_seed, default=0, help="(default: %(default)s)")
    gen.add_argument("--data-dir", type=_path, help="folder holding the corpus, for a run folder without vocab.json")
    gen.set_defaults(run=_generate)

    reproduce = commands.add_parser("reproduce", help="rerun a paper's experiment",
                                    description="Rerun a paper's experiment and write its figures and report.")
    experiments = reproduce.add_subparsers(dest="subcommand", required=True, metavar="EXPERIMENT")
    for recipe in REPRODUCE_RECIPES:
        _add_recipe(experiments, recipe)
    for name, helptext in (("gates", "what a trained highway MLP's gates learned (Fig. 2)"),
                           ("lesion", "test accuracy with each layer of a highway MLP lesioned (Fig. 4)")):
        p = experiments.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".",
                                   epilog=f"example: highwaynet reproduce {name} "
                                          "runs/depth-mnist5k/highway-50/lr0.03-seed0")
        p.add_argument("run_dir", type=_path, metavar="RUN_DIR",
                       help="a trained highway mlp run folder (a depth sweep's is OUT/highway-DEPTH/lrLR-seedSEED)")
        p.add_argument("--out", type=_path, help=f"(default: RUN_DIR/{name}, which the run started over clears)")
        p.add_argument("--data-dir", type=_path, help="folder with the data files")
        p.add_argument("--download", action="store_true", help=DOWNLOAD_HELP)
        p.add_argument("--restart", action="store_true",
                       help="remove what an earlier analysis wrote into --out first (files of your own stay)")
        p.set_defaults(run=_reproduce_gates if name == "gates" else _reproduce_lesion)

    report = commands.add_parser("report", help="write a self-contained HTML page for experiment folders",
                                 description="Write report.html (figures inlined, configuration and versions "
                                             "appended) beside each folder's report.md.")
    report.add_argument("folders", nargs="+", type=_path, metavar="FOLDER")
    report.set_defaults(run=_report)

    _add_elmo(commands)

    pred = commands.add_parser("predict", help="classify sentences with a trained sentence classifier",
                               description="Print the label and class probabilities of each sentence.")
    pred.add_argument("run_dir", type=_path, metavar="RUN_DIR")
    pred.add_argument("sentences", nargs="+", metavar="SENTENCE")
    pred.set_defaults(run=_predict)
    return parser


def _add_elmo(commands: Any) -> None:
    elmo = commands.add_parser("elmo", help="ELMo and SeqVec vectors from the published weights, without AllenNLP",
                               description="ELMo's and SeqVec's published biLMs (bilm-tf's options.json and "
                                           "weights.hdf5), run by highwaynet.")
    actions = elmo.add_subparsers(dest="subcommand", required=True, metavar="ACTION")
    embed = actions.add_parser(
        "embed", help="embed a file of sentences (one a line) into an HDF5 file",
        description="Embed every line of --input (one sentence a line, tokens separated by white space; a protein "
                    "for SeqVec: its residues separated by spaces) into --out: one dataset per line, named by its "
                    "index from 0. Run again, it goes on where it stopped (--restart starts over); under torchrun "
                    "each process embeds its share and one file results.",
        epilog="example: highwaynet elmo embed --options options.json --weights weights.hdf5 --input sentences.txt "
               "--out vectors.hdf5 --layers top")
    model = embed.add_argument_group("model (--options and --weights, or --model)")
    # (dest: args.options is the train and reproduce commands' settings)
    model.add_argument("--options", type=_path, dest="options_file", metavar="OPTIONS", help="the biLM's options.json")
    model.add_argument("--weights", type=_path, dest="weights_file", metavar="WEIGHTS", help="the biLM's weights.hdf5")
    model.add_argument("--model", help="a published model by name: small, medium, original, original-5.5b, seqvec "
                                       "(looked for in --data-dir, or fetched with --download)")
    model.add_argument("--data-dir", type=_path,
                       help="where --model's files are (default: $HIGHWAYNET_DATA, ~/.cache/highwaynet)")
    model.add_argument("--download", action="store_true",
                       help="download --model's files from their publisher (unchecked, with a warning that gives "
                            "each file's sha256: the publishers give none)")
    model.add_argument("--sha256", nargs=2, type=_sha256, metavar=("OPTIONS", "WEIGHTS"),
                       help="check --model's two files against these sha256s (the options file's, then the weight "
                            "file's), found or downloaded")
    embed.add_argument("--input", type=_path, required=True, help="the sentences, one a line (UTF-8)")
    embed.add_argument("--out", type=_path, required=True, help="the HDF5 file to write")
    embed.add_argument("--layers", choices=("all", "top", "average"), default="all",
                       help="every layer (layers, tokens, 2P), the top one, or their mean (default: %(default)s)")
    embed.add_argument("--batch-size", type=_positive_int, default=64, help="sentences a batch (default: %(default)s)")
    embed.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N (default: %(default)s)")
    embed.add_argument("--stateful", action="store_true",
                       help="carry the LSTM states from batch to batch, as AllenNLP's elmo command did (a line's "
                            "vectors then depend on the lines before it); default: each batch starts from zeros")
    embed.add_argument("--restart", action="store_true",
                       help="start over: remove what this command wrote at --out (the output file and the pieces of "
                            "an unfinished run; files of your own stay) and embed again")
    embed.add_argument("--no-progress", action="store_true", help="no progress bar")
    embed.set_defaults(run=_elmo_embed)


def _elmo_embed(args: argparse.Namespace) -> None:
    from .elmo.embed import embed_file
    from .elmo.files import download_model

    if args.model is not None:
        if args.options_file or args.weights_file:
            raise ValueError("pass --model, or --options and --weights, not both")
        options, weights = download_model(args.model, args.data_dir, download=args.download, sha256=args.sha256)
    elif args.sha256:
        raise ValueError("--sha256 checks --model's files; for --options and --weights, check them with sha256sum")
    elif not (args.options_file and args.weights_file):
        raise ValueError("pass --options and --weights (a biLM's options.json and weights.hdf5), or --model NAME")
    else:
        options, weights = args.options_file, args.weights_file
    embed_file(options, weights, args.input, args.out, layers=args.layers, batch_size=args.batch_size,
               device=check_device(args.device), stateful=args.stateful, restart=args.restart,
               progress=not args.no_progress)


def parse(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, Any]:
    """The parsed arguments and, for a train or reproduce command, its configuration (else None)."""
    args = build_parser().parse_args(argv)
    options: ConfigOptions | None = getattr(args, "options", None)
    return args, (options.build(args) if options is not None else None)


def _generate(args: argparse.Namespace) -> None:
    from .recipes import lm

    model, config, corpus = lm.load_trained(args.run_dir, args.data_dir)
    prompt = decode_escapes(args.prompt)
    print(prompt, end="", flush=True)
    for piece in lm.stream(model, corpus, prompt, args.length, args.temperature, args.seed):
        print(piece, end="", flush=True)
    print()


_ESCAPE = re.compile(r"\\(?:[ntr\\'\"]|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8})")


def decode_escapes(text: str) -> str:
    """``text`` with its backslash escapes (``\\n``, ``\\t``, ``\\u00e9``, ...) made the characters they
    stand for, and every other character kept as typed (``café`` stays ``café``)."""
    return _ESCAPE.sub(lambda match: codecs.decode(match.group(0), "unicode_escape"), text)


def _reproduce_gates(args: argparse.Namespace) -> None:
    from .recipes.gates import analyze_gates

    result = analyze_gates(args.run_dir, args.out, args.data_dir, download=args.download, restart=args.restart)
    print(f"test accuracy {100 * result['test_acc']:.2f}%; {100 * result['closed_fraction']:.1f}% of gate outputs "
          f"below 0.1; wrote {args.out or args.run_dir + '/gates'}/gates.png")


def _reproduce_lesion(args: argparse.Namespace) -> None:
    from .recipes.gates import lesion_layers

    result = lesion_layers(args.run_dir, args.out, args.data_dir, download=args.download, restart=args.restart)
    print(f"intact {100 * result['baseline']:.2f}%; worst single lesion "
          f"{100 * min(result['lesioned']):.2f}%; {result['harmless']} of {len(result['lesioned'])} layers "
          f"cost at most one point; wrote {args.out or args.run_dir + '/lesion'}/lesion.png")


def _report(args: argparse.Namespace) -> None:
    from pathlib import Path

    from . import recipes  # noqa: F401  (the analyses the recipes write: a folder of one is known by its result)
    from .report import write_html

    for folder in args.folders:
        print(f"wrote {write_html(Path(folder))}")


def _predict(args: argparse.Namespace) -> None:
    from .recipes import sentences

    for sentence, (label, probs) in zip(args.sentences, sentences.predict(args.run_dir, args.sentences),
                                        strict=True):
        print(f"{label}\t{' '.join(f'{name}={p:.3f}' for name, p in probs.items())}\t{sentence}")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        status = _main(argv)
        sys.stdout.flush()  # (a reader gone is found here, not at exit, where Python reports it as an error)
        return status
    except KeyboardInterrupt:  # (during start-up or a report too: a line, not a traceback)
        print("highwaynet: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Its output's reader has gone (``highwaynet train ... | head -3``): the command stops quietly, as one
        # that SIGPIPE stops (status 128 + 13, as 130 above is 128 + SIGINT); a run stopped so resumes from its
        # last checkpoint, as an interrupted one does. What is left buffered goes nowhere (Python's signal docs).
        with contextlib.suppress(OSError, ValueError):  # (a stdout without a descriptor: nothing to flush later)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        options: ConfigOptions | None = getattr(args, "options", None)
        settings = options.build(args) if options is not None else None
    except ValueError as error:
        print(f"highwaynet: error: {error}", file=sys.stderr)
        return 2
    from .training import files
    from .training.distributed import barrier, init_distributed, is_main_process, leave_distributed
    from .training.trainer import TrainingDiverged

    files.track_new_folders()  # (a command refused once it made its folder removes it again: see below)
    try:
        if settings is not None:
            from .config.train import device_of

            # A device this machine lacks is refused before anything is made (on every process alike under
            # torchrun, each then joining the group with the backend of its run's device).
            init_distributed(check_device(device_of(settings)))
        # Under torchrun every process runs the command; rank 0 alone prints (errors go to stderr from any).
        with contextlib.ExitStack() as quiet:
            if not is_main_process():
                quiet.enter_context(contextlib.redirect_stdout(quiet.enter_context(open(os.devnull, "w"))))
            if settings is not None:
                from .training.run_dir import settings_named_by

                # (a folder's settings named in messages by the options that set them, as the user typed them)
                with settings_named_by(options.flags if options is not None else {}):
                    args.recipe.run(args, settings)
            else:
                args.run(args)
        barrier()  # the processes finish together: one that leaves while another still uses the group can abort
    except BrokenPipeError:
        raise  # (not an error of the command's: main stops quietly)
    except (ValueError, FileNotFoundError, FileExistsError, OSError, ImportError) as error:
        files.remove_new_folders()
        print(f"highwaynet: error: {error}", file=sys.stderr)
        return 2
    except TrainingDiverged as error:
        print(f"highwaynet: error: {error}", file=sys.stderr)
        return 1
    finally:
        files.track_new_folders(on=False)
        leave_distributed()
    return 0


def check_device(name: str) -> str:
    """``name``, once this machine is known to have the device (else the error that says what to pass)."""
    from .training.devices import pick_device

    pick_device(name)
    return name


if __name__ == "__main__":
    sys.exit(main())
