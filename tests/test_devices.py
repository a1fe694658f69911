"""Devices, torchrun's backend and checkpoints across devices, on a CPU machine made to look like a GPU one.

The code only asks PyTorch whether CUDA is there, how many GPUs there are, and which process it is
(torchrun's environment); patched answers reproduce here what a GPU machine does, without one.
"""

import pytest
import torch
import torch.distributed as dist

from highwaynet.cli import main
from highwaynet.data import load_digits
from highwaynet.models import HighwayMLP
from highwaynet.training import ClassificationTask, TrainConfig, Trainer, checkpoint, distributed
from highwaynet.training.devices import DeviceUnavailable, pick_device


@pytest.fixture
def gpus(monkeypatch):
    """``gpus(n)``: this machine now reports ``n`` CUDA devices (0: a machine without CUDA)."""
    def have(n: int) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
    return have


@pytest.fixture
def torchrun(monkeypatch):
    """``torchrun(local_rank, processes)``: this process is one of ``processes`` torchrun started on one machine."""
    def start(local_rank: int, processes: int) -> None:
        for name, value in (("WORLD_SIZE", processes), ("RANK", local_rank), ("LOCAL_RANK", local_rank),
                            ("LOCAL_WORLD_SIZE", processes)):
            monkeypatch.setenv(name, str(value))
    return start


def test_auto_and_cuda_resolve_to_this_processs_gpu(gpus, torchrun):
    gpus(2)
    assert pick_device("auto") == torch.device("cuda") == pick_device("cuda")
    assert pick_device("cpu") == torch.device("cpu")
    torchrun(1, 2)
    assert pick_device("auto") == torch.device("cuda", 1) == pick_device("cuda")
    assert pick_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("local_rank", [0, 1])
def test_more_processes_than_gpus_is_refused_alike_on_every_rank(gpus, torchrun, local_rank):
    """Rank 0 must refuse as rank 1 does: one that went on would wait for the other forever."""
    gpus(1)
    torchrun(local_rank, 2)
    for name in ("auto", "cuda"):
        with pytest.raises(DeviceUnavailable, match="2 processes on this machine but 1 GPU: pass "
                                                    "--nproc_per_node=1 or fewer, or --device cpu"):
            pick_device(name)
    assert pick_device("cpu") == torch.device("cpu")


def test_an_explicit_gpu_under_torchrun_is_honoured_for_one_process_and_refused_for_several(gpus, torchrun):
    gpus(2)
    torchrun(0, 1)
    assert pick_device("cuda:1") == torch.device("cuda", 1)
    torchrun(0, 2)
    with pytest.raises(DeviceUnavailable, match="each of the 2 processes on this machine takes the GPU of its "
                                                "LOCAL_RANK, and cuda:1 would put them all on one"):
        pick_device("cuda:1")


def test_missing_devices_say_what_to_pass(gpus):
    gpus(0)
    with pytest.raises(DeviceUnavailable, match="'cuda': this machine has no CUDA device .* pass --device cpu"):
        pick_device("cuda")
    gpus(2)
    with pytest.raises(DeviceUnavailable, match=r"'cuda:2': this machine has 2 CUDA devices \(cuda:0 to cuda:1\)"):
        pick_device("cuda:2")
    if not torch.backends.mps.is_available():
        with pytest.raises(DeviceUnavailable, match="no MPS device"):
            pick_device("mps")
    for bad in ("cuda:-1", "gpu", ""):
        with pytest.raises(ValueError, match="is not a device: use auto, cpu, cuda, cuda:N or mps"):
            pick_device(bad)
    # devices torch names but nothing runs on here: each was an error from inside torch at the first tensor (a
    # RuntimeError, NotImplementedError, AssertionError or ModuleNotFoundError)
    with pytest.raises(DeviceUnavailable, match="'meta' holds no values .* pass --device cpu"):
        pick_device("meta")
    with pytest.raises(DeviceUnavailable, match=r"'lazy': PyTorch cannot make a tensor there on this machine "
                                                r"\(NotImplementedError: .*\); pass --device cpu"):
        pick_device("lazy")
    assert pick_device("cpu:0") == torch.device("cpu", 0)


@pytest.fixture
def joined(monkeypatch):
    """Record the backend a process joins torchrun's group with, and the GPU it makes current."""
    seen = {"set_device": []}
    monkeypatch.setattr(dist, "is_initialized", lambda: "backend" in seen)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kwargs: seen.update(backend=backend))
    monkeypatch.setattr(torch.cuda, "set_device", seen["set_device"].append)
    monkeypatch.setattr(distributed, "world", lambda: (0, 2) if "backend" in seen else (0, 1))
    return seen


def test_the_backend_follows_the_runs_device(gpus, torchrun, joined):
    """On a GPU machine a CPU run joins with gloo and touches no GPU; a CUDA run with NCCL on its own GPU."""
    gpus(2)
    torchrun(1, 2)
    distributed.init_distributed("cpu")
    assert joined == {"backend": "gloo", "set_device": []}
    joined.pop("backend")
    distributed.init_distributed("auto")
    assert joined == {"backend": "nccl", "set_device": [torch.device("cuda", 1)]}


def test_the_cli_refuses_a_missing_device_before_it_makes_anything(tmp_path, capsys, gpus):
    gpus(0)
    out = tmp_path / "run"
    assert main(["train", "mlp", "--data", "digits", "--epochs", "1", "--device", "cuda", "--out", str(out)]) == 2
    assert "this machine has no CUDA device" in capsys.readouterr().err
    assert not out.exists()


def test_the_cli_under_torchrun_with_too_few_gpus_exits_with_a_message_on_every_rank(tmp_path, capsys, gpus,
                                                                                      torchrun, joined):
    gpus(1)
    for local_rank in (0, 1):
        torchrun(local_rank, 2)
        assert main(["train", "mlp", "--data", "digits", "--epochs", "1", "--out", str(tmp_path / "run")]) == 2
        assert "2 processes on this machine but 1 GPU" in capsys.readouterr().err
    assert "backend" not in joined and not (tmp_path / "run").exists()


def _trainer(run_dir, epochs):
    torch.manual_seed(0)
    data = load_digits(max_train=200)
    model = HighwayMLP(data.in_features, 10, depth=3, width=16, dropout=0.2)
    return Trainer(model, ClassificationTask(data, batch_size=50, seed=1),
                   TrainConfig(epochs=epochs, lr=0.05, seed=1, device="cpu"), run_dir, progress=False)


def test_a_gpu_run_resumes_reading_its_checkpoint_on_the_cpu(tmp_path, monkeypatch):
    """A Trainer on CUDA (emulated: its device says cuda, the CUDA generator calls are recorded)
    resumes a checkpoint: every tensor is read onto the CPU, where a generator state must be, whatever
    device the run is on (0.2 read it onto the run's device, and called the good file damaged)."""
    _trainer(tmp_path, 1).fit()
    asked, cuda_states = [], []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, map_location=None, **k: asked.append(map_location)
                        or real_load(*a, map_location=map_location, **k))
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: cuda_states.append((state, device)))
    monkeypatch.setattr(torch.cuda, "manual_seed", lambda seed: cuda_states.append(seed))
    resumed = _trainer(tmp_path, 2)
    resumed.device = torch.device("cuda", 0)
    logs = []
    resumed.log = logs.append
    assert resumed.load_checkpoint()
    assert asked == ["cpu"]
    assert cuda_states == [1 + 1]  # saved off CUDA: the CUDA generator seeded from the seed and epoch
    assert any("saved on cpu, now on cuda:0" in line for line in logs)
    assert any("CUDA generator starts from the seed" in line for line in logs)


def test_a_checkpoint_saved_on_a_gpu_resumes_on_the_cpu_saying_so_in_one_line(tmp_path):
    """A checkpoint as a GPU run writes it (its device, its CUDA generator's state) resumes on a CPU-only
    machine: the CPU generators restored, and one line saying the random numbers now differ."""
    _trainer(tmp_path, 1).fit()
    path = tmp_path / "checkpoint.pt"
    state = torch.load(path, weights_only=True)
    state["device"] = "cuda:0"
    for rank_state in state["rng"]:
        rank_state["cuda"] = torch.zeros(16, dtype=torch.uint8)
    torch.save(state, path)
    resumed = _trainer(tmp_path, 2)
    logs = []
    resumed.log = logs.append
    resumed.fit(resume=True)
    assert resumed.epoch == 2
    assert any("saved on cuda:0, now on cpu" in line for line in logs)
    assert [line for line in logs if line.startswith("note:")] == [
        "note: the checkpoint was saved on CUDA and this run is on cpu: random numbers from here on differ from an "
        "uninterrupted run's"]


def test_a_cpu_run_on_a_gpu_machine_saves_no_cuda_generator(gpus):
    gpus(2)  # (0.2 saved every GPU's generator whatever the run's device, and failed to restore them elsewhere)
    assert "cuda" not in checkpoint.rng_state(torch.device("cpu"))


def test_each_process_restores_its_own_generators(monkeypatch):
    """Every process's generator states are saved (a list by rank); each takes its own back, and a
    process beyond those saved takes rank 0's, saying so."""
    torch.manual_seed(5)
    first = checkpoint.rng_state(torch.device("cpu"))
    torch.manual_seed(6)
    second = checkpoint.rng_state(torch.device("cpu"))
    assert checkpoint.restore_rng_state([first, second], torch.device("cpu"), 1, seed=0) == []
    assert torch.equal(torch.get_rng_state(), second["torch"])
    notes = checkpoint.restore_rng_state([first, second], torch.device("cpu"), 2, seed=0)
    assert torch.equal(torch.get_rng_state(), first["torch"])
    assert notes == ["the checkpoint holds the random generator states of 2 processes; process 2 takes those of "
                     "process 0"]
    # 0.2 saved one state (rank 0's) and every GPU's generator; such a checkpoint still restores
    assert checkpoint.restore_rng_state(second, torch.device("cpu"), 0, seed=0) == []
    assert torch.equal(torch.get_rng_state(), second["torch"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("first, then", [("cuda", "cuda"), ("cuda", "cpu"), ("cpu", "cuda")])
def test_the_cli_resumes_a_run_on_another_device(tmp_path, capsys, first, then):
    """Two epochs on ``first``; the last checkpoint put aside (as a kill in epoch 2 leaves the run), the
    run goes on on ``then``: it finishes its two epochs and says where it moved."""
    run = tmp_path / "run"
    args = ["train", "mlp", "--data", "digits", "--depth", "4", "--width", "16", "--epochs", "2", "--out", str(run)]
    assert main([*args, "--device", first]) == 0
    (run / "checkpoint.prev.pt").replace(run / "checkpoint.pt")
    capsys.readouterr()
    assert main([*args, "--device", then, "--resume"]) == 0
    said = capsys.readouterr().out
    assert "resumed" in said and "epoch 2/2" in said
    if first != then:
        assert f"(saved on {first}" in said and f"now on {then}" in said
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2
