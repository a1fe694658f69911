import gc
import itertools
import json
import math
import weakref

import pytest
import torch

from highwaynet.data import load_digits
from highwaynet.models import HighwayMLP
from highwaynet.training import ClassificationTask, SentenceTask, TrainConfig, Trainer, read_metrics
from highwaynet.training import trainer as trainer_module


def without_time(history):
    return [{k: v for k, v in m.items() if k != "time"} for m in history]


def make_trainer(run_dir, data, epochs=4, ema=0.0):
    torch.manual_seed(0)
    model = HighwayMLP(data.in_features, 10, depth=5, width=16, dropout=0.2)
    config = TrainConfig(epochs=epochs, lr=0.05, schedule="cosine", seed=3, ema=ema)
    return Trainer(model, ClassificationTask(data, batch_size=64, seed=3), config, run_dir,
                   log=lambda s: None, progress=False)


def interrupt(trainer, epoch, steps=0):
    """Make ``trainer`` stop in epoch ``epoch`` (from 1) after ``steps`` training steps, as Ctrl-C does; returns
    the list its lines are logged into, and its task's own batches (to put back)."""
    batches = trainer.task.batches

    def killed(split, at):
        if split == "train" and at == epoch - 1:
            yield from itertools.islice(batches(split, at), steps)
            raise KeyboardInterrupt
        yield from batches(split, at)

    trainer.task.batches = killed
    logs = []
    trainer.log = logs.append
    return logs, batches


@pytest.mark.parametrize("ema", [0.0, 0.9])
def test_resume_after_kill_equals_uninterrupted_run(tmp_path, ema):
    """(With ``ema`` the checkpoint carries the average of the weights too.)"""
    data = load_digits()
    uninterrupted = make_trainer(tmp_path / "full", data, ema=ema)
    full = uninterrupted.fit()

    interrupted = make_trainer(tmp_path / "cut", data, ema=ema)
    logs, _ = interrupt(interrupted, 3, steps=1)  # one step of epoch 3 runs, then the process dies
    with pytest.raises(KeyboardInterrupt):
        interrupted.fit()
    assert len(read_metrics(tmp_path / "cut")) == 2
    assert logs[-1] == (f"interrupted in epoch 3; epoch 2 is the last saved: run the same command again to go on "
                        f"from there (from Python: fit() again, on the same run folder {tmp_path / 'cut'})")

    resumed = make_trainer(tmp_path / "cut", data, ema=ema)
    history = resumed.fit()  # fit again: it goes on
    assert without_time(history) == without_time(full)
    assert without_time(read_metrics(tmp_path / "cut")) == without_time(read_metrics(tmp_path / "full"))
    for a, b in zip(resumed.model.state_dict().values(), uninterrupted.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    for a, b in zip(*(torch.load(tmp_path / run / "checkpoint.pt", weights_only=True)["model"].values()
                      for run in ("cut", "full")), strict=True):
        assert torch.equal(a, b)


def test_interrupted_in_the_first_epoch_says_nothing_is_saved(tmp_path):
    trainer = make_trainer(tmp_path, load_digits())
    trainer.task.batches = lambda split, epoch: (_ for _ in ()).throw(KeyboardInterrupt)
    logs = []
    trainer.log = logs.append
    with pytest.raises(KeyboardInterrupt):
        trainer.fit()
    assert logs[-1] == ("interrupted in epoch 1; no epoch had finished, so nothing is saved: run the same command "
                        "again to start over (from Python: fit() again starts over from the model's first weights, "
                        "not from where it stopped)")
    make_trainer(tmp_path, load_digits(), epochs=1).fit()  # and starting again in the same folder works


@pytest.mark.parametrize("killed_in", [1, 3])
def test_interrupted_without_a_run_folder_says_fit_again_starts_over(killed_in):
    """Without a run folder nothing is saved, and fit() again starts from the first weights: the line says so,
    where it said only "nothing is saved", which read as if fit() again went on."""
    trainer = make_trainer(None, load_digits())
    logs, _ = interrupt(trainer, killed_in)
    with pytest.raises(KeyboardInterrupt):
        trainer.fit()
    assert logs[-1] == (f"interrupted in epoch {killed_in}; nothing is saved (no run folder): fit() again starts "
                        f"over from the model's first weights, not from where it stopped")
    assert "starts over from the model's first weights" in " ".join(Trainer.fit.__doc__.split())


@pytest.mark.parametrize("folder, killed_in", [("run", 1), ("run", 3), (None, 1), (None, 3)])
def test_fit_again_on_the_same_trainer_after_an_interruption_ends_as_a_run_never_interrupted(tmp_path, folder,
                                                                                              killed_in):
    """fit() again on the Trainer interrupted goes on from the last checkpoint, or from the first weights where
    there is none (no epoch saved, or no run folder), as a new process does: in epoch 1 it went on from the
    weights, momentum and average part-way through that epoch, ending elsewhere than a run never interrupted."""
    data = load_digits()
    run_dir = tmp_path / "cut" if folder else None
    full = make_trainer(tmp_path / "full", data, ema=0.9).fit()
    trainer = make_trainer(run_dir, data, ema=0.9)
    _, batches = interrupt(trainer, killed_in, steps=3)
    with pytest.raises(KeyboardInterrupt):
        trainer.fit()
    trainer.task.batches = batches
    assert without_time(trainer.fit()) == without_time(full)
    if run_dir is not None:
        assert without_time(read_metrics(run_dir)) == without_time(full)


def test_metrics_line_without_checkpoint_is_dropped_on_resume(tmp_path):
    data = load_digits()
    make_trainer(tmp_path, data, epochs=2).fit()
    # A kill between the metrics line and the checkpoint of epoch 3 leaves a line too many (one as
    # the trainer writes it: every number of the lines before)
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write(json.dumps({**read_metrics(tmp_path)[-1], "epoch": 3, "val_loss": 9.9}) + "\n")
    trainer = make_trainer(tmp_path, data, epochs=3)
    trainer.fit(resume=True)
    assert [m["epoch"] for m in read_metrics(tmp_path)] == [1, 2, 3]
    assert read_metrics(tmp_path)[2]["val_loss"] != 9.9


def test_fit_again_goes_on_and_a_folder_without_a_checkpoint_starts_from_scratch(tmp_path):
    data = load_digits()
    make_trainer(tmp_path / "a", data, epochs=1).fit()
    again = make_trainer(tmp_path / "a", data, epochs=1)
    logged: list[str] = []
    again.log = logged.append
    assert len(again.fit()) == 1  # nothing overwritten, nothing trained again
    assert logged == [f"{tmp_path / 'a'} holds this run, finished after epoch 1: nothing left to train"]
    assert len(read_metrics(tmp_path / "a")) == 1
    logged = []
    trainer = make_trainer(tmp_path / "b", data, epochs=1)
    trainer.log = logged.append
    assert len(trainer.fit(resume=True)) == 1  # nothing to go on from: the run starts over, and says so
    assert "holds no checkpoint yet" in logged[0] and "starting it from scratch" in logged[0]


def test_checkpoint_loads_with_weights_only(tmp_path):
    data = load_digits()
    make_trainer(tmp_path, data, epochs=1).fit()
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert state["epoch"] == 1 and "optimizer" in state and "rng" in state
    assert set(torch.load(tmp_path / "model.pt", weights_only=True)) == set(state["model"])


@pytest.mark.parametrize("ema", [0.0, 0.9])
def test_a_trainer_is_freed_when_dropped_without_the_collector(tmp_path, ema):
    # Under torchrun a Trainer holds a DDP wrapper, which holds the process group; a Trainer kept
    # alive by its own reference cycles outlived leave_distributed and took gloo down at exit.
    data = load_digits()
    gc.disable()
    try:
        trainer = make_trainer(tmp_path, data, epochs=1, ema=ema)
        trainer.fit()
        trainer.evaluate("test")
        alive = weakref.ref(trainer)
        del trainer
        assert alive() is None, [type(r).__name__ for r in gc.get_referrers(alive())]
    finally:
        gc.enable()


def test_bf16_autocast_option_trains(tmp_path):
    data = load_digits()
    torch.manual_seed(0)
    model = HighwayMLP(64, 10, depth=4, width=32)
    trainer = Trainer(model, ClassificationTask(data, 64), TrainConfig(epochs=3, lr=0.1, amp=True),
                      log=lambda s: None, progress=False)
    history = trainer.fit()
    assert history[-1]["val_acc"] > 0.5


def test_ema_is_the_average_of_every_steps_weights_validated_saved_and_held(tmp_path):
    """``ema=d``: after step k the average is ``a_k = d a_(k-1) + (1 - d) w_k`` (``a_1 = w_1``), written
    out here in float64 from the weights after each step; it is what each epoch validates, what
    model.pt holds, and what the model holds when fit returns."""
    data, decay = load_digits(max_train=300), 0.8
    trainer = make_trainer(tmp_path, data, epochs=2, ema=decay)
    expected: dict[str, torch.Tensor] = {}
    step = trainer._train_step

    def step_and_average(*args, **kwargs):
        stats = step(*args, **kwargs)
        for name, w in trainer.model.state_dict().items():
            w = w.double()
            expected[name] = w.clone() if name not in expected else decay * expected[name] + (1 - decay) * w
        return stats

    epoch, at_epoch_end = trainer._run_epoch, []

    def epoch_and_snapshot(*args):
        metrics = epoch(*args)
        at_epoch_end.append(dict(expected))
        return metrics

    trainer._train_step, trainer._run_epoch = step_and_average, epoch_and_snapshot
    history = trainer.fit()
    assert trainer.ema.n_averaged.item() == 2 * 5  # 300 digits in batches of 64, two epochs
    for name, w in trainer.model.state_dict().items():
        torch.testing.assert_close(w.double(), expected[name], rtol=1e-6, atol=1e-7, msg=name)
    best = min(range(2), key=lambda e: history[e]["val_loss"])
    for name, w in torch.load(tmp_path / "model.pt", weights_only=True).items():
        torch.testing.assert_close(w.double(), at_epoch_end[best][name], rtol=1e-6, atol=1e-7, msg=name)
    # The last epoch validated the average, which the model now holds.
    assert trainer.evaluate("val")["loss"] == pytest.approx(history[-1]["val_loss"], rel=1e-6)
    raw = torch.load(tmp_path / "checkpoint.pt", weights_only=True)["model"]
    assert any(not torch.equal(raw[name], w) for name, w in trainer.model.state_dict().items())


def test_resuming_with_ema_a_run_started_without_it_is_refused(tmp_path):
    data = load_digits(max_train=300)
    make_trainer(tmp_path, data, epochs=1).fit()
    with pytest.raises(ValueError, match="other settings than the Trainer's configuration .ema 0.0 then, 0.9 now"):
        make_trainer(tmp_path, data, epochs=2, ema=0.9).fit(resume=True)


def test_bad_config():
    with pytest.raises(ValueError, match="optimizer must be one of 'sgd', 'adam', 'adamw'; got 'lbfgs'"):
        TrainConfig(optimizer="lbfgs")
    with pytest.raises(ValueError, match=r"TrainConfig.ema must be below 1.0, got 1.0"):
        TrainConfig(ema=1.0)
    with pytest.raises(ValueError, match="schedule must be one of"):
        TrainConfig(schedule="linear")
    for value in (float("nan"), float("inf"), -1.0, 0.0):  # (a NaN once passed the check lr <= 0)
        with pytest.raises(ValueError, match="TrainConfig.lr must be"):
            TrainConfig(lr=value)


def _digits_trainer(**changes):
    data = load_digits(max_train=100)
    arguments = {"model": HighwayMLP(data.in_features, 10, depth=2, width=8),
                 "task": ClassificationTask(data, batch_size=50), "config": TrainConfig(epochs=1, device="cpu"),
                 "run_dir": None, "log": lambda s: None, "progress": False, **changes}
    return Trainer(**arguments)


@pytest.mark.parametrize("changes, error, message", [
    ({"model": "model"}, TypeError, "model must be an nn.Module, got str"),
    ({"task": None}, TypeError, "task must be a Task"),
    ({"config": {"epochs": 1}}, TypeError, "config must be a TrainConfig, got dict"),
    ({"run_dir": 5}, TypeError, "run_dir must be a path"),
    ({"run_dir": ""}, ValueError, "run_dir must be a path, got an empty string"),  # (not the current folder)
    ({"log": 3}, TypeError, "log must be a function"),
    ({"progress": "no"}, TypeError, "progress must be a bool"),
    ({"gate_means": 1}, TypeError, "gate_means must be a bool"),
])
def test_trainer_arguments_are_checked_by_name(changes, error, message):
    with pytest.raises(error, match=message):
        _digits_trainer(**changes)


@pytest.mark.parametrize("arguments, error, message", [
    ({"max_time": "1"}, TypeError, "max_time must be a real number"),
    ({"max_time": float("nan")}, ValueError, "max_time must be finite"),
    ({"max_time": -1}, ValueError, "max_time must be at least 0"),
    ({"resume": "no"}, TypeError, "resume must be a bool"),  # (a truthy string once meant resume)
    ({"restart": 1}, TypeError, "restart must be a bool"),
])
def test_fit_arguments_are_checked_by_name(arguments, error, message):
    with pytest.raises(error, match=message):
        _digits_trainer().fit(**arguments)


def test_max_epochs_stops_early_on_the_schedule_set_for_all_the_epochs(tmp_path):
    """fit(max_epochs=k) trains k epochs at the rates of a schedule set for config.epochs (a run cut
    short on a longer run's schedule: the depth study's schedule control), and run again with it
    trains no further; the same run without it goes on to the end of its schedule."""
    config = TrainConfig(epochs=8, lr=0.1, schedule="cosine", device="cpu")
    trainer = _digits_trainer(config=config, run_dir=tmp_path / "run")
    history = trainer.fit(max_epochs=3)
    assert [m["lr"] for m in history] == pytest.approx([0.05 * (1 + math.cos(math.pi * e / 8)) for e in range(3)])
    assert (tmp_path / "run" / "checkpoint.pt").is_file()
    again = _digits_trainer(config=config, run_dir=tmp_path / "run")
    assert len(again.fit(max_epochs=3)) == 3 and again.epoch == 3
    assert len(again.fit()) == 8
    for wrong, error in ((0, ValueError), (2.5, TypeError), (True, TypeError), ("3", TypeError)):
        with pytest.raises(error, match="max_epochs must be"):
            _digits_trainer().fit(max_epochs=wrong)


def test_a_task_without_a_val_split_is_refused_before_training(tmp_path):
    """The Trainer validates after each epoch: a task without 'val' failed only once epoch 1 had trained."""
    data = load_digits(max_train=100)
    task = ClassificationTask({"train": data.train, "test": data.test}, batch_size=50)
    trainer = Trainer(HighwayMLP(64, 10, depth=3, width=8), task, TrainConfig(epochs=1, device="cpu"),
                      tmp_path / "run", progress=False)
    trainer._run_epoch = lambda epoch: pytest.fail("trained")
    with pytest.raises(ValueError, match=r"fit: the task has no 'val' split \(it has 'train', 'test'\): the Trainer "
                                         r"trains on 'train' and validates on 'val' after each epoch"):
        trainer.fit()
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("task, arguments, error, message", [
    (ClassificationTask, {"batch_size": 0}, ValueError, "batch_size must be positive, got 0"),
    (ClassificationTask, {"batch_size": "64"}, TypeError, "batch_size must be an int"),
    (ClassificationTask, {"eval_batch_size": -1}, ValueError, "eval_batch_size must be positive"),
    (ClassificationTask, {"seed": 1.5}, TypeError, "seed must be an int"),
    (ClassificationTask, {"augment": 3}, TypeError, "augment must be a function"),
    (SentenceTask, {"min_length": 0}, ValueError, "min_length must be positive"),
    (SentenceTask, {"adversarial": "1"}, TypeError, "adversarial must be a real number"),
])
def test_task_arguments_are_checked_by_name(task, arguments, error, message):
    with pytest.raises(error, match=message):
        task(load_digits(max_train=100), **arguments)
    with pytest.raises(TypeError, match="splits must be a dict"):
        task(None)


@pytest.mark.skipif(not trainer_module._FUSED_ON_CPU, reason="PyTorch's fused CPU updates need torch >= 2.4")
@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw"])
def test_cpu_update_is_fused_and_trains_as_the_default(optimizer, monkeypatch):
    data = load_digits()
    histories = []
    for fused in (True, False):
        monkeypatch.setattr(trainer_module, "_FUSED_ON_CPU", fused)
        torch.manual_seed(0)
        model = HighwayMLP(64, 10, depth=3, width=16)
        config = TrainConfig(epochs=2, optimizer=optimizer, lr=0.01, weight_decay=1e-3, device="cpu")
        trainer = Trainer(model, ClassificationTask(data, 64, seed=0), config, log=lambda s: None, progress=False)
        assert trainer.optimizer.param_groups[0]["fused"] is (True if fused else None)
        histories.append(trainer.fit())
    for epoch in range(2):
        for key in ("train_loss", "val_loss", "val_acc"):
            assert histories[0][epoch][key] == pytest.approx(histories[1][epoch][key], abs=1e-3), (epoch, key)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_resume_runs_the_update_this_machine_chose_not_the_checkpoints(tmp_path, optimizer):
    # A checkpoint saved elsewhere: with the fused update where this machine has none (a newer
    # torch; torch 2.3 has no fused CPU kernels) or without it where it has one, and with Adam's
    # CUDA-graph setting. Resuming must take this machine's settings, and train as if uninterrupted.
    data = load_digits()

    def trainer(run_dir, epochs):
        torch.manual_seed(0)
        config = TrainConfig(epochs=epochs, optimizer=optimizer, lr=0.01, device="cpu")
        return Trainer(HighwayMLP(64, 10, depth=3, width=16), ClassificationTask(data, 64, seed=0), config,
                       run_dir, log=lambda s: None, progress=False)

    full = trainer(tmp_path / "full", 2).fit()
    trainer(tmp_path / "cut", 1).fit()
    path = tmp_path / "cut" / "checkpoint.pt"
    state = torch.load(path, weights_only=True)
    chosen = {k: v for k, v in state["optimizer"]["param_groups"][0].items() if k != "params"}
    for group in state["optimizer"]["param_groups"]:
        group["fused"] = None if group["fused"] else True
        if optimizer == "adam":
            group["capturable"] = True
    torch.save(state, path)

    resumed = trainer(tmp_path / "cut", 2)
    history = resumed.fit(resume=True)
    group = {k: v for k, v in resumed.optimizer.param_groups[0].items() if k != "params"}
    assert group == chosen
    for key in ("train_loss", "val_loss", "val_acc"):
        assert history[1][key] == pytest.approx(full[1][key], abs=1e-4), key


def test_compile_option_matches_eager():
    data = load_digits()
    histories = []
    for compiled in (False, True):
        torch.manual_seed(0)
        model = HighwayMLP(64, 10, depth=3, width=16)
        trainer = Trainer(model, ClassificationTask(data, 64, seed=0), TrainConfig(epochs=1, lr=0.05, compile=compiled),
                          log=lambda s: None, progress=False)
        histories.append(trainer.fit()[0])
    for key in ("train_loss", "val_loss", "val_acc"):
        assert abs(histories[0][key] - histories[1][key]) < 1e-3, key


def test_cuda_graph_option_needs_cuda_and_a_graph_safe_task():
    data = load_digits()
    with pytest.raises(ValueError, match="cuda_graph: it needs a CUDA device"):
        Trainer(HighwayMLP(64, 10, depth=2, width=8), ClassificationTask(data, 64),
                TrainConfig(epochs=1, device="cpu", cuda_graph=True), log=lambda s: None, progress=False)
    # Sentence batches are packed by lengths read on the host: refused before any device is asked for.
    sentences = {"train": ([torch.tensor([2, 3])], torch.tensor([0]))}
    with pytest.raises(ValueError, match="SentenceTask does not declare graph_safe"):
        Trainer(HighwayMLP(64, 10, depth=2, width=8), SentenceTask(sentences),
                TrainConfig(epochs=1, device="cpu", cuda_graph=True), log=lambda s: None, progress=False)


def _graph_vs_eager(optimizer, dropout=0.0, epochs=3):
    data = load_digits()
    runs = []
    for graphed in (False, True):
        torch.manual_seed(0)
        model = HighwayMLP(64, 10, depth=6, width=32, dropout=dropout)
        # batch 100 leaves a smaller last batch: a second graph shape; the cosine schedule changes
        # the learning rate every epoch: recaptures.
        config = TrainConfig(epochs=epochs, lr=0.05 if optimizer == "sgd" else 3e-3, optimizer=optimizer,
                             schedule="cosine", grad_clip=5.0, seed=1, device="cuda", cuda_graph=graphed)
        trainer = Trainer(model, ClassificationTask(data, 100, seed=1), config, log=lambda s: None, progress=False)
        runs.append((trainer, trainer.fit()))
    return runs


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_cuda_graph_steps_equal_eager_steps(optimizer):
    (eager, h_eager), (graphed, h_graphed) = _graph_vs_eager(optimizer)
    steps = graphed._graphed
    assert steps.replays > 0 and steps.captures >= 2 * 3  # two batch shapes, a new learning rate each epoch
    assert steps.eager_steps < 3 + 2 * 3 + 1  # warm-up, then one per new shape and rate
    for a, b in zip(without_time(h_eager), without_time(h_graphed), strict=True):
        for key in ("train_loss", "val_loss", "val_acc"):
            assert abs(a[key] - b[key]) < 1e-4, (key, a[key], b[key])
    # cuBLAS may pick other algorithms under capture: rounding differences, grown over ~50 steps,
    # stay far below what a wrong update (a missed step, a stale rate or batch) would give. Adam
    # normalises each coordinate's step, so a rounding difference in a near-zero gradient can move
    # that coordinate by up to lr per step: its bound is a few steps' worth.
    atol = 1e-4 if optimizer == "sgd" else 3e-2
    for p, q in zip(eager.model.parameters(), graphed.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-3, atol=atol)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_graph_with_dropout_trains():
    (_, h_eager), (_, h_graphed) = _graph_vs_eager("sgd", dropout=0.2, epochs=4)
    assert h_graphed[-1]["val_acc"] > 0.8
    assert abs(h_graphed[-1]["val_acc"] - h_eager[-1]["val_acc"]) < 0.1


def test_recipes_graph_steps_by_default_on_cuda_in_one_process_only(monkeypatch):
    from highwaynet.training.cuda_graph import use_cuda_graphs

    assert use_cuda_graphs(None, "cuda") and not use_cuda_graphs(None, "cpu")
    assert use_cuda_graphs(False, "cuda") is False and use_cuda_graphs(True, "cpu") is True  # as asked
    monkeypatch.setenv("WORLD_SIZE", "2")  # under torchrun, where the Trainer refuses graphed steps
    assert not use_cuda_graphs(None, "cuda")
