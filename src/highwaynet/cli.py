"""The ``highwaynet`` command.

    highwaynet train mlp --data mnist5k --depth 50 --width 50 --epochs 10
    highwaynet train mlp --data mnist5k --depth 50 --plain
    highwaynet train mlp --out runs/x --resume
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence

from . import __version__

EPILOG = "Run folders hold config.json, metrics.jsonl, checkpoint.pt, model.pt and results.json."
DOWNLOAD_HELP = "download missing data files from their public source (sha256-checked)"


def _int_at_least(minimum: int, what: str):
    """An argparse type: an integer of at least ``minimum``, else a message naming ``what`` it must be."""
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text}")
        return value
    parse.__name__ = "integer"  # argparse's word for text int() rejects: "invalid integer value: 'x'"
    return parse


_positive_int = _int_at_least(1, "a positive integer")
_non_negative_int = _int_at_least(0, "0 or more")


def _add_training_options(p: argparse.ArgumentParser, epochs: int, lr: float, optimizer: str,
                          batch_size: int = 100, weight_decay: float = 0.0, schedule: str = "constant",
                          epoch: str = "a pass over the training data") -> None:
    g = p.add_argument_group("training")
    g.add_argument("--epochs", type=_positive_int, default=epochs,
                   help=f"training epochs, each {epoch} (default: %(default)s)")
    g.add_argument("--batch-size", type=_positive_int, default=batch_size,
                   help="training batch size (default: %(default)s)")
    g.add_argument("--optimizer", choices=("sgd", "adam", "adamw"), default=optimizer, help="(default: %(default)s)")
    g.add_argument("--lr", type=float, default=lr, help="learning rate (default: %(default)s)")
    g.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default: %(default)s)")
    g.add_argument("--weight-decay", type=float, default=weight_decay, help="(default: %(default)s)")
    g.add_argument("--schedule", choices=("constant", "cosine", "step"), default=schedule,
                   help="learning-rate schedule over the epochs (default: %(default)s)")
    g.add_argument("--seed", type=int, default=0,
                   help="seeds initialisation, dropout and data order (default: %(default)s)")
    g.add_argument("--device", default="auto",
                   help="auto (CUDA, MPS, then CPU), cpu, cuda, cuda:1, ... (default: %(default)s)")
    g.add_argument("--amp", action="store_true", help="train under bfloat16 autocast")
    _add_ema_option(g)
    g.add_argument("--compile", action="store_true", help="run the model through torch.compile")
    g.add_argument("--cuda-graph", action="store_true",
                   help="replay each training step as a CUDA graph (launch-bound models on a GPU: small deep "
                        "nets, RHNs)")
    r = p.add_argument_group("run folder")
    r.add_argument("--out", help="the run folder (default: runs/<a name from the options>)")
    r.add_argument("--resume", action="store_true",
                   help="continue the run in --out after its last finished epoch, with its saved config")


def _add_ema_option(group) -> None:
    group.add_argument("--ema", type=float, default=0.0, metavar="DECAY",
                       help="validate and keep an exponential moving average of the weights, updated every step, "
                            "instead of the last weights (e.g. 0.995; default: off)")


def _add_data_options(p: argparse.ArgumentParser, choices: Sequence[str], default: str) -> None:
    g = p.add_argument_group("data")
    g.add_argument("--data", choices=choices, default=default, help="data set (default: %(default)s)")
    g.add_argument("--data-dir", help="folder with the data files (default: $HIGHWAYNET_DATA, ~/.cache/highwaynet, "
                                      "and where packages install them)")
    g.add_argument("--download", action="store_true", help=DOWNLOAD_HELP)


def _add_sweep_options(p: argparse.ArgumentParser, out: str | None, data_help: str) -> None:
    p.add_argument("--data-dir", help=data_help)
    p.add_argument("--download", action="store_true", help=DOWNLOAD_HELP)
    p.add_argument("--device", default="auto", help="(default: %(default)s)")
    p.add_argument("--out", default=out, help=f"(default: {out or 'runs/depth-<data>'})")
    p.add_argument("--resume", action="store_true", help="skip finished runs, resume unfinished ones")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="highwaynet", description="Highway Networks: train the layers, rerun the papers' experiments.",
        epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"highwaynet {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = commands.add_parser("train", help="train one model", description="Train one model.")
    models = train.add_subparsers(dest="model", required=True, metavar="MODEL")

    mlp = models.add_parser(
        "mlp", help="a deep highway (or plain) fully connected network on images",
        description="A deep fully connected classifier on images: one plain layer to the width, then "
                    "depth-1 highway layers (or, with --plain, depth plain layers), then softmax. "
                    "Prints one line per epoch and writes a run folder.",
        epilog="example: highwaynet train mlp --data mnist5k --depth 50 --width 50 --epochs 10")
    _add_data_options(mlp, ("mnist5k", "fashion-mnist", "digits", "mnist"), "mnist5k")
    g = mlp.add_argument_group("model")
    g.add_argument("--depth", type=int, default=50, help="hidden layers, at least 2 (default: %(default)s)")
    g.add_argument("--width", type=_positive_int, default=50, help="units per hidden layer (default: %(default)s)")
    g.add_argument("--plain", action="store_true", help="a plain network of the same depth, no highway gates")
    g.add_argument("--activation", default="relu", choices=("relu", "tanh", "sigmoid", "gelu"),
                   help="(default: %(default)s)")
    g.add_argument("--gate-bias", type=float, default=-4.0, help="initial transform-gate bias (default: %(default)s)")
    g.add_argument("--init", choices=("default", "he"), default="default",
                   help="linear weights as nn.Linear initialises them, or He et al. (default: %(default)s)")
    g.add_argument("--dropout", type=float, default=0.0, help="dropout on each hidden layer (default: %(default)s)")
    g.add_argument("--max-train", type=_positive_int, help="use at most this many training images")
    _add_training_options(mlp, epochs=10, lr=0.1, optimizer="sgd")
    mlp.set_defaults(run=_train_mlp)

    cnn = models.add_parser(
        "cnn", help="a convolutional highway (or plain) network on images, with crops and flips",
        description="A convolutional classifier: per stage a 3x3 convolution to the stage's width, then "
                    "highway convolutions (or, with --plain, plain conv-BN-ReLU layers), then 2x2 max-pooling; "
                    "global average pooling and a linear classifier. Trains with random crops and flips.",
        epilog="example: highwaynet train cnn --data fashion-mnist --epochs 30")
    _add_data_options(cnn, ("fashion-mnist", "mnist5k", "digits", "mnist"), "fashion-mnist")
    g = cnn.add_argument_group("model")
    g.add_argument("--channels", default="32,64,128", help="channels of each stage (default: %(default)s)")
    g.add_argument("--layers-per-stage", type=_positive_int, default=3, help="(default: %(default)s)")
    g.add_argument("--plain", action="store_true", help="a plain CNN of the same depth and width")
    g.add_argument("--gate-bias", type=float, default=-1.0, help="(default: %(default)s)")
    g.add_argument("--no-augment", action="store_true", help="no random crops and flips")
    g.add_argument("--max-train", type=_positive_int, help="use at most this many training images")
    _add_training_options(cnn, epochs=30, lr=0.05, optimizer="sgd", batch_size=128, weight_decay=5e-4,
                          schedule="cosine")
    cnn.set_defaults(run=_train_cnn)

    lm = models.add_parser(
        "lm", help="a character- or word-level language model, RHN or LSTM",
        description="A language model on a text corpus: embedding, a Recurrent Highway Network (or an LSTM), "
                    "a decoder tied to the embedding. Reports bits per character (char) or perplexity (word).",
        epilog="example: highwaynet train lm --corpus austen --level word --model rhn --depth 5 "
               "--data-dir ../shared/data/text")
    g = lm.add_argument_group("corpus")
    g.add_argument("--corpus", default="tinyshakespeare",
                   help="tinyshakespeare, austen, or a folder with train.txt/valid.txt/test.txt (default: %(default)s)")
    g.add_argument("--level", choices=("char", "word"), default="char", help="(default: %(default)s)")
    g.add_argument("--max-vocab", type=_positive_int, help="most frequent tokens kept (word default: 10000)")
    g.add_argument("--data-dir", help="folder holding the corpora (default: $HIGHWAYNET_DATA, ~/.cache/highwaynet)")
    g.add_argument("--download", action="store_true", help="download Tiny Shakespeare if missing")
    g = lm.add_argument_group("model")
    g.add_argument("--model", choices=("rhn", "lstm"), default="rhn", help="(default: %(default)s)")
    g.add_argument("--depth", type=_positive_int, default=4, help="RHN recurrence depth (default: %(default)s)")
    g.add_argument("--hidden", type=_positive_int, default=256, help="state size (default: %(default)s)")
    g.add_argument("--layers", type=_positive_int, default=1, help="stacked recurrent layers (default: %(default)s)")
    g.add_argument("--no-tie", action="store_true", help="do not tie the embedding and decoder weights")
    g.add_argument("--dropout", type=float, default=0.1,
                   help="variational dropout on inputs, states and outputs (default: %(default)s)")
    g.add_argument("--bptt", type=_positive_int, default=50, help="truncated BPTT window (default: %(default)s)")
    g.add_argument("--steps-per-epoch", type=_non_negative_int, default=200,
                   help="windows per epoch, from a random start; 0: the whole training text (default: %(default)s)")
    _add_training_options(lm, epochs=10, lr=2e-3, optimizer="adam", batch_size=32,
                          epoch="--steps-per-epoch windows of --bptt steps")
    lm.set_defaults(run=_train_lm)

    gen = commands.add_parser("generate", help="sample text from a trained language model",
                              description="Sample text from a language model's run folder (its best weights).")
    gen.add_argument("run_dir", metavar="RUN_DIR")
    gen.add_argument("--prompt", default="\n", help="text to start from (default: a new line)")
    gen.add_argument("--length", type=_positive_int, default=200, help="tokens to sample (default: %(default)s)")
    gen.add_argument("--temperature", type=float, default=0.8,
                     help="below 1 sharper, above 1 flatter; 0: the likeliest token each step (default: %(default)s)")
    gen.add_argument("--seed", type=int, default=0, help="(default: %(default)s)")
    gen.add_argument("--data-dir", help="folder holding the corpus, for a run folder without vocab.json")
    gen.set_defaults(run=_generate)

    reproduce = commands.add_parser("reproduce", help="rerun a paper's experiment",
                                    description="Rerun a paper's experiment and write its figures and report.")
    experiments = reproduce.add_subparsers(dest="experiment", required=True, metavar="EXPERIMENT")
    depth = experiments.add_parser(
        "rhn-depth", help="RHN language models against recurrence depth at a fixed budget, and vs an LSTM",
        description="RHN language models at recurrence depths 1..10 with the parameter budget fixed, then an "
                    "LSTM of the same budget trained for the same time. Writes depth.png and report.md.")
    depth.add_argument("--corpora", default="tinyshakespeare:char",
                       help="comma-separated name:level pairs (default: %(default)s)")
    depth.add_argument("--depths", default="1,2,4,6,8,10", help="(default: %(default)s)")
    depth.add_argument("--budget", type=_positive_int, default=200_000,
                       help="parameters per model (default: %(default)s)")
    depth.add_argument("--epochs", type=_positive_int, default=8, help="epochs per RHN (default: %(default)s)")
    depth.add_argument("--steps-per-epoch", type=_non_negative_int, default=50,
                       help="windows per epoch; 0: the whole training text (default: %(default)s)")
    depth.add_argument("--batch-size", type=_positive_int, default=128, help="(default: %(default)s)")
    depth.add_argument("--dropout", type=float, default=0.0,
                       help="variational dropout on inputs, states (RHN) and outputs (default: %(default)s)")
    depth.add_argument("--lr", type=float, default=3e-3, help="Adam's learning rate (default: %(default)s)")
    depth.add_argument("--no-lstm", action="store_true", help="skip the LSTM baseline")
    depth.add_argument("--no-cuda-graph", action="store_true",
                       help="on a GPU, run training steps eagerly instead of as CUDA graphs")
    _add_sweep_options(depth, "runs/rhn-depth", "folder holding the corpora")
    depth.set_defaults(run=_reproduce_rhn_depth)

    sent = experiments.add_parser(
        "sentences", help="sentence classification: HBiLSTM vs BiLSTM stacks by depth, and Kim's CNN",
        description="Sentence classification on SST-1, SST-2, MR, Subj and TREC: highway BiLSTM stacks against "
                    "plain BiLSTM stacks of each depth, Kim's CNN and Kim's CNN with highway layers. Several "
                    "seeds (10-fold cross-validation for MR and Subj). Writes report.md and depth-<task>.png.",
        epilog="The best setting measured (one block, on all five sets) adds: --gate-bias 0 --hidden 300 --ema 0.995; "
               "--embed-dim 1000 on top added 0.3 to 0.5 points on SST-2 and TREC, and --adversarial 5 on top of "
               "that 1.5 to 2 more on SST-2 and TREC, at 2.3 times the time; on SST-1 "
               "--adversarial 20 did better than 5, 44.0 against 42.8 (README, Results). "
               "Example: highwaynet reproduce sentences --task sst2 --encoder bilstm,hbilstm --layers 1,2,4,8")
    sent.add_argument("--task", default="sst2", help="sst1, sst2, mr, subj, trec, or a folder of your own set "
                                                     "(files train, test and optionally dev, 'LABEL sentence' "
                                                     "lines), comma-separated; or all (default: %(default)s)")
    sent.add_argument("--encoder", default="hbilstm",
                      help="hbilstm, bilstm, cnn, cnn-highway, comma-separated (default: %(default)s)")
    sent.add_argument("--layers", default="1", help="stack depths, comma-separated (default: %(default)s)")
    sent.add_argument("--seeds", default="0", help="seeds for SST and TREC (default: %(default)s)")
    sent.add_argument("--folds", type=_positive_int, default=10,
                      help="how many of the 10 cross-validation folds to run for MR and Subj (default: %(default)s)")
    sent.add_argument("--hidden", type=_positive_int, default=150,
                      help="LSTM size per direction (default: %(default)s)")
    sent.add_argument("--embed-dim", type=_positive_int, default=300, help="(default: %(default)s)")
    sent.add_argument("--dropout", type=float, default=0.5,
                      help="dropout on the sentence vector and between blocks (default: %(default)s)")
    sent.add_argument("--embed-dropout", type=float, default=0.0,
                      help="dropout on the word vectors (default: %(default)s)")
    sent.add_argument("--gate-bias", type=float, default=-2.0,
                      help="initial transform-gate bias of the highway blocks (default: %(default)s)")
    sent.add_argument("--resize", choices=("projection", "zeropad"), default="projection",
                      help="how a highway block's input reaches its width (default: %(default)s)")
    sent.add_argument("--vectors", help="word vectors in a text file (GloVe or word2vec text format)")
    sent.add_argument("--adversarial", type=float, default=0.0, metavar="EPS",
                      help="adversarial training on the word vectors (Miyato et al., 2017): also train on each "
                           "batch with its word vectors moved EPS times their own scale against the model; twice "
                           "the time a step (default: %(default)s, off)")
    sent.add_argument("--epochs", type=_positive_int, default=10, help="(default: %(default)s)")
    sent.add_argument("--batch-size", type=_positive_int, default=50,
                      help="training batch size (default: %(default)s)")
    sent.add_argument("--lr", type=float, default=1e-3, help="Adam's learning rate (default: %(default)s)")
    _add_ema_option(sent)
    sent.add_argument("--report-only", action="store_true",
                      help="train nothing: report the runs already finished in --out (a sweep split over "
                           "several processes, each with --resume)")
    _add_sweep_options(sent, "runs/sentences", "folder holding the sentence files")
    sent.set_defaults(run=_reproduce_sentences)

    deep = experiments.add_parser(
        "depth", help="plain vs highway MLPs at 10/20/50/100 layers (Training Very Deep Networks, Fig. 1)",
        description="Plain (71 wide) and highway (50 wide) MLPs at each depth, He initialisation, SGD with "
                    "momentum; a learning-rate search per net (the first seed at every rate), then more seeds. "
                    "Writes depth.png and report.md.",
        epilog="example: highwaynet reproduce depth --data fashion-mnist --max-train 10000")
    deep.add_argument("--data", choices=("mnist5k", "fashion-mnist", "digits", "mnist"), default="mnist5k",
                      help="(default: %(default)s)")
    deep.add_argument("--depths", default="10,20,50,100", help="(default: %(default)s)")
    deep.add_argument("--lrs", default="0.01,0.03,0.1", help="learning rates searched (default: %(default)s)")
    deep.add_argument("--epochs", type=_positive_int, default=6, help="(default: %(default)s)")
    deep.add_argument("--seeds", default="0,1,2", help="(default: %(default)s)")
    deep.add_argument("--gate-bias", type=float, default=-4.0, help="(default: %(default)s)")
    deep.add_argument("--max-train", type=_positive_int, help="use at most this many training images")
    deep.add_argument("--grad-clip", type=float, default=1.0,
                      help="clip each gradient's norm to this; 0: no clipping (default: %(default)s)")
    deep.add_argument("--no-cuda-graph", action="store_true",
                      help="on a GPU, run training steps eagerly instead of as CUDA graphs")
    _add_sweep_options(deep, None, "folder with the data files")
    deep.set_defaults(run=_reproduce_depth)

    for name, helptext in (("gates", "what a trained highway MLP's gates learned (Fig. 2)"),
                           ("lesion", "test accuracy with each layer of a highway MLP lesioned (Fig. 4)")):
        p = experiments.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".",
                                   epilog=f"example: highwaynet reproduce {name} runs/depth-mnist5k/highway-50/seed0")
        p.add_argument("run_dir", metavar="RUN_DIR", help="a trained highway mlp run folder")
        p.add_argument("--out", help=f"(default: RUN_DIR/{name})")
        p.add_argument("--data-dir", help="folder with the data files")
        p.add_argument("--download", action="store_true", help=DOWNLOAD_HELP)
        p.set_defaults(run=_reproduce_gates if name == "gates" else _reproduce_lesion)

    report = commands.add_parser("report", help="write a self-contained HTML page for experiment folders",
                                 description="Write report.html (figures inlined, configuration and versions "
                                             "appended) beside each folder's report.md.")
    report.add_argument("folders", nargs="+", metavar="FOLDER")
    report.set_defaults(run=_report)

    pred = commands.add_parser("predict", help="classify sentences with a trained sentence classifier",
                               description="Print the label and class probabilities of each sentence.")
    pred.add_argument("run_dir", metavar="RUN_DIR")
    pred.add_argument("sentences", nargs="+", metavar="SENTENCE")
    pred.set_defaults(run=_predict)
    return parser


def _train_config(args: argparse.Namespace):
    from .training import TrainConfig

    if args.resume and not args.out:
        raise ValueError("--resume needs --out, the run folder to continue")
    return TrainConfig(epochs=args.epochs, optimizer=args.optimizer, lr=args.lr, momentum=args.momentum,
                       weight_decay=args.weight_decay, schedule=args.schedule, seed=args.seed,
                       device=args.device, amp=args.amp, compile=args.compile,
                       cuda_graph=args.cuda_graph, ema=args.ema)


def _say_what_runs(args: argparse.Namespace, out: str, config, recipe: str, new_run: str) -> None:
    """``new_run``, or for a resumed run, which continues with the settings it was started with,
    the folder and the settings asked for that it does not apply."""
    from .training.run_dir import load_run_config, settings_differ

    if not args.resume:
        print(new_run)
        return
    print(f"resuming the run in {out}")
    differ = settings_differ(load_run_config(out, recipe)["config"], config)
    if differ:
        print("--resume continues the run with the settings it was started with; not applied: " + ", ".join(differ))


def _train_mlp(args: argparse.Namespace) -> None:
    from .recipes import mlp

    if args.depth < 2:
        raise ValueError(f"--depth must be at least 2 (one plain layer, then highway layers), got {args.depth}")
    config = mlp.MLPConfig(data=args.data, depth=args.depth, width=args.width, plain=args.plain,
                           activation=args.activation, gate_bias=args.gate_bias, init=args.init,
                           dropout=args.dropout, batch_size=args.batch_size,
                           max_train=args.max_train, train=_train_config(args))
    _run_image_recipe(args, mlp.run, config, "MLP", args.depth)


def _run_image_recipe(args: argparse.Namespace, run, config, what: str, depth: int) -> None:
    kind = "plain" if args.plain else "highway"
    out = args.out or f"runs/{what.lower()}-{args.data}-{kind}{depth}-seed{args.seed}"
    _say_what_runs(args, out, config, what.lower(),
                   f"training a {depth}-layer {kind} {what} on {args.data}; run folder: {out}")
    results = run(config, out, resume=args.resume, data_dir=args.data_dir, download=args.download)
    print(f"test_loss {results['test']['loss']:.4f}  test_acc {results['test']['acc']:.4f}  "
          f"({results['parameters']:,} parameters, {results['seconds']:.1f}s on {results['device']})")


def _train_cnn(args: argparse.Namespace) -> None:
    from .recipes import cnn

    train = _train_config(args)
    train.monitor = "val_acc"
    config = cnn.CNNConfig(data=args.data, channels=_int_list(args.channels, "--channels"),
                           layers_per_stage=args.layers_per_stage, plain=args.plain, gate_bias=args.gate_bias,
                           augment=not args.no_augment, batch_size=args.batch_size, max_train=args.max_train,
                           train=train)
    _run_image_recipe(args, cnn.run, config, "CNN", config.depth)


def _train_lm(args: argparse.Namespace) -> None:
    from .recipes import lm

    train = _train_config(args)
    train.grad_clip = 1.0
    config = lm.LMConfig(corpus=args.corpus, level=args.level, model=args.model, depth=args.depth,
                         hidden=args.hidden, layers=args.layers, tie_weights=not args.no_tie,
                         input_dropout=args.dropout, state_dropout=args.dropout, output_dropout=args.dropout,
                         max_vocab=args.max_vocab, batch_size=args.batch_size, bptt=args.bptt,
                         steps_per_epoch=args.steps_per_epoch or None, train=train)
    name = f"{args.model}-depth{args.depth}" if args.model == "rhn" else "lstm"
    out = args.out or f"runs/lm-{args.corpus.rstrip('/').split('/')[-1]}-{args.level}-{name}-seed{args.seed}"
    _say_what_runs(args, out, config, "lm",
                   f"training a {name} language model on {args.corpus} ({args.level} level); run folder: {out}")
    results = lm.run(config, out, resume=args.resume, data_dir=args.data_dir, download=args.download)
    key = "bpc" if config.level == "char" else "ppl"
    print(f"test_loss {results['test']['loss']:.4f}  test_{key} {results['test'][key]:.4f}  "
          f"({results['parameters']:,} parameters, {results['seconds']:.1f}s on {results['device']})")
    print(results["sample"])


def _generate(args: argparse.Namespace) -> None:
    from .recipes import lm

    if not args.temperature >= 0:
        raise ValueError(f"--temperature must be 0 (greedy: the likeliest token each step) or positive, "
                         f"got {args.temperature}")
    model, config, corpus = lm.load_trained(args.run_dir, args.data_dir)
    prompt = args.prompt.encode().decode("unicode_escape") if "\\" in args.prompt else args.prompt
    print(lm.sample(model, corpus, prompt, args.length, args.temperature, args.seed))


def _int_list(text: str, name: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{name} takes comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise ValueError(f"{name} takes positive integers, got {text!r}")
    return values


def _reproduce_rhn_depth(args: argparse.Namespace) -> None:
    from .recipes import rhn_depth

    config = rhn_depth.RHNDepthConfig(corpora=[c.strip() for c in args.corpora.split(",")],
                                      depths=_int_list(args.depths, "--depths"), budget=args.budget,
                                      lstm=not args.no_lstm, cuda_graph=False if args.no_cuda_graph else None)
    config.base.train.epochs = args.epochs
    config.base.train.lr = args.lr
    config.base.input_dropout = config.base.state_dropout = config.base.output_dropout = args.dropout
    config.base.train.device = args.device
    config.base.steps_per_epoch = args.steps_per_epoch or None
    config.base.batch_size = args.batch_size
    summary = rhn_depth.run(config, args.out, resume=args.resume, data_dir=args.data_dir, download=args.download)
    print(f"wrote {args.out}/report.md and {args.out}/depth.png ({summary['seconds']:.0f}s)")


def _reproduce_sentences(args: argparse.Namespace) -> None:
    from .models.sentence import STACKED_ENCODERS
    from .recipes import sentences
    from .training import TrainConfig
    from .training.run_dir import count, format_mean_std

    tasks = list(sentences.SENTENCE_TASKS) if args.task == "all" else [t.strip() for t in args.task.split(",")]
    if args.folds > 10:
        raise ValueError(f"--folds is at most 10, got {args.folds}")
    base = sentences.SentenceConfig(hidden=args.hidden, embed_dim=args.embed_dim, resize=args.resize,
                                    dropout=args.dropout, embed_dropout=args.embed_dropout, vectors=args.vectors,
                                    batch_size=args.batch_size, gate_bias=args.gate_bias,
                                    adversarial=args.adversarial,
                                    train=TrainConfig(epochs=args.epochs, optimizer="adam", lr=args.lr,
                                                      monitor="val_acc", grad_clip=5.0, device=args.device,
                                                      ema=args.ema))
    config = sentences.SweepConfig(tasks=tasks, encoders=[e.strip() for e in args.encoder.split(",")],
                                   layers=_int_list(args.layers, "--layers"),
                                   seeds=[int(s) for s in args.seeds.split(",")], folds=args.folds, base=base)
    summary = sentences.sweep(config, args.out, resume=args.resume, data_dir=args.data_dir,
                              download=args.download, report_only=args.report_only)
    for row in summary["table"]:
        depth = count(row["layers"], "layer") if row["encoder"] in STACKED_ENCODERS else "-"
        print(f"{row['task']:5} {row['encoder']:12} {depth:>10}  "
              f"{format_mean_std(row, row['runs'])}% ({count(row['runs'], 'run')})")
    print(f"wrote {args.out}/report.md ({summary['seconds']:.0f}s)")


def _float_list(text: str, name: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{name} takes comma-separated numbers, got {text!r}") from None
    if not values or min(values) <= 0:
        raise ValueError(f"{name} takes positive numbers, got {text!r}")
    return values


def _reproduce_depth(args: argparse.Namespace) -> None:
    from .recipes import depth
    from .training.run_dir import format_mean_std

    depths = _int_list(args.depths, "--depths")
    if min(depths) < 2:
        raise ValueError(f"--depths must all be at least 2 (one plain layer, then highway layers), got {args.depths}")
    config = depth.DepthConfig(data=args.data, depths=depths, lrs=_float_list(args.lrs, "--lrs"),
                               epochs=args.epochs,
                               seeds=[int(s) for s in args.seeds.split(",")], gate_bias=args.gate_bias,
                               max_train=args.max_train, grad_clip=args.grad_clip or None, device=args.device,
                               cuda_graph=False if args.no_cuda_graph else None)
    out = args.out or f"runs/depth-{args.data}"
    summary = depth.run(config, out, resume=args.resume, data_dir=args.data_dir, download=args.download)
    for net in summary["nets"]:
        print(f"{net['depth']:4} layers {net['kind']:8} lr {net['lr']:<5g} train loss "
              f"{format_mean_std(net['train_loss'], len(net['curves']), 4)}  test acc "
              f"{format_mean_std(net['test_acc'], len(net['curves']), 2)}%")
    print(f"wrote {out}/report.md and {out}/depth.png ({summary['seconds']:.0f}s)")


def _reproduce_gates(args: argparse.Namespace) -> None:
    from .recipes.gates import analyze_gates

    result = analyze_gates(args.run_dir, args.out, args.data_dir, download=args.download)
    print(f"test accuracy {100 * result['test_acc']:.2f}%; {100 * result['closed_fraction']:.1f}% of gate outputs "
          f"below 0.1; wrote {args.out or args.run_dir + '/gates'}/gates.png")


def _reproduce_lesion(args: argparse.Namespace) -> None:
    from .recipes.gates import lesion_layers

    result = lesion_layers(args.run_dir, args.out, args.data_dir, download=args.download)
    print(f"intact {100 * result['baseline']:.2f}%; worst single lesion "
          f"{100 * min(result['lesioned']):.2f}%; {result['harmless']} of {len(result['lesioned'])} layers "
          f"cost at most one point; wrote {args.out or args.run_dir + '/lesion'}/lesion.png")


def _report(args: argparse.Namespace) -> None:
    from pathlib import Path

    from .report import write_html

    for folder in args.folders:
        print(f"wrote {write_html(Path(folder))}")


def _predict(args: argparse.Namespace) -> None:
    from .recipes import sentences

    for sentence, (label, probs) in zip(args.sentences, sentences.predict(args.run_dir, args.sentences),
                                        strict=True):
        print(f"{label}\t{' '.join(f'{name}={p:.3f}' for name, p in probs.items())}\t{sentence}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from .training.distributed import barrier, init_distributed, is_main_process, leave_distributed

    init_distributed()  # a no-op unless started by torchrun
    try:
        # Under torchrun every process runs the command; rank 0 alone prints (errors go to stderr from any).
        with contextlib.ExitStack() as quiet:
            if not is_main_process():
                quiet.enter_context(contextlib.redirect_stdout(quiet.enter_context(open(os.devnull, "w"))))
            args.run(args)
        barrier()  # the processes finish together: one that leaves while another still uses the group can abort
    except KeyboardInterrupt:
        return 130
    except (ValueError, FileNotFoundError, FileExistsError, OSError) as error:
        print(f"highwaynet: error: {error}", file=sys.stderr)
        return 2
    finally:
        leave_distributed()
    return 0


if __name__ == "__main__":
    sys.exit(main())
