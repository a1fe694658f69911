import json

import pytest
import torch

from highwaynet.data import load_digits
from highwaynet.models import HighwayMLP
from highwaynet.training import ClassificationTask, TrainConfig, Trainer, read_metrics


def without_time(history):
    return [{k: v for k, v in m.items() if k != "time"} for m in history]


def make_trainer(run_dir, data, epochs=4):
    torch.manual_seed(0)
    model = HighwayMLP(data.in_features, 10, depth=5, width=16, dropout=0.2)
    config = TrainConfig(epochs=epochs, lr=0.05, schedule="cosine", seed=3)
    return Trainer(model, ClassificationTask(data, batch_size=64, seed=3), config, run_dir,
                   log=lambda s: None, progress=False)


def test_resume_after_kill_equals_uninterrupted_run(tmp_path):
    data = load_digits()
    full = make_trainer(tmp_path / "full", data).fit()

    interrupted = make_trainer(tmp_path / "cut", data)
    batches = interrupted.task.batches

    def killed_in_epoch_3(split, epoch):
        if split == "train" and epoch == 2:
            yield next(batches(split, epoch))  # one step of epoch 3 runs, then the process dies
            raise KeyboardInterrupt
        yield from batches(split, epoch)

    interrupted.task.batches = killed_in_epoch_3
    with pytest.raises(KeyboardInterrupt):
        interrupted.fit()
    assert len(read_metrics(tmp_path / "cut")) == 2

    resumed = make_trainer(tmp_path / "cut", data)
    history = resumed.fit(resume=True)
    assert without_time(history) == without_time(full)
    assert without_time(read_metrics(tmp_path / "cut")) == without_time(read_metrics(tmp_path / "full"))
    for a, b in zip(resumed.model.state_dict().values(), full_model_state(tmp_path), strict=True):
        assert torch.equal(a, b)


def full_model_state(tmp_path):
    state = torch.load(tmp_path / "full" / "checkpoint.pt", weights_only=True)["model"]
    return list(state.values())


def test_metrics_line_without_checkpoint_is_dropped_on_resume(tmp_path):
    data = load_digits()
    make_trainer(tmp_path, data, epochs=2).fit()
    # A kill between the metrics line and the checkpoint of epoch 3 leaves a line too many.
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"epoch": 3, "time": 0.0, "val_loss": 9.9}) + "\n")
    trainer = make_trainer(tmp_path, data, epochs=3)
    trainer.fit(resume=True)
    assert [m["epoch"] for m in read_metrics(tmp_path)] == [1, 2, 3]
    assert read_metrics(tmp_path)[2]["val_loss"] != 9.9


def test_refuses_to_overwrite_and_needs_checkpoint(tmp_path):
    data = load_digits()
    make_trainer(tmp_path / "a", data, epochs=1).fit()
    with pytest.raises(FileExistsError, match="already holds a run"):
        make_trainer(tmp_path / "a", data, epochs=1).fit()
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        make_trainer(tmp_path / "b", data).fit(resume=True)


def test_checkpoint_loads_with_weights_only(tmp_path):
    data = load_digits()
    make_trainer(tmp_path, data, epochs=1).fit()
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert state["epoch"] == 1 and "optimizer" in state and "rng" in state
    assert set(torch.load(tmp_path / "model.pt", weights_only=True)) == set(state["model"])


def test_bf16_autocast_option_trains(tmp_path):
    data = load_digits()
    torch.manual_seed(0)
    model = HighwayMLP(64, 10, depth=4, width=32)
    trainer = Trainer(model, ClassificationTask(data, 64), TrainConfig(epochs=3, lr=0.1, amp=True),
                      log=lambda s: None, progress=False)
    history = trainer.fit()
    assert history[-1]["val_acc"] > 0.5


def test_bad_config():
    with pytest.raises(ValueError, match="optimizer must be"):
        TrainConfig(optimizer="lbfgs")
    with pytest.raises(ValueError, match="schedule must be"):
        TrainConfig(schedule="linear")


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
