import copy

import numpy as np
import pytest
import torch

from highwaynet.analysis import gate_means, gate_modules, lesion, record_gates
from highwaynet.models import HighwayMLP
from highwaynet.nn import Highway, HighwayConv2d


def test_recorder_returns_sigmoid_of_t_half():
    torch.manual_seed(0)
    net = Highway(6, 3).double()
    x = torch.randn(5, 6, dtype=torch.float64)
    with record_gates(net) as rec:
        net(x)
    assert rec.names == ["gates.0", "gates.1", "gates.2"]
    # Recompute each layer's T by hand from the projections.
    h = x
    for i, proj in enumerate(net.layers):
        z = proj(h)
        t = torch.sigmoid(z[:, 6:])
        torch.testing.assert_close(rec.values(i), t.detach(), rtol=0, atol=1e-15)
        h = t * torch.relu(z[:, :6]) + (1 - t) * h
    assert rec.mean_per_gate().shape == (3,)
    # Observers are detached on exit.
    assert all(g.is_plain for _, g in gate_modules(net))


def test_recorder_concatenates_calls_and_finds_nested_gates():
    model = torch.nn.Sequential(HighwayConv2d(2, 3), torch.nn.Flatten(), Highway(2 * 4 * 4, 2))
    with record_gates(model) as rec:
        model(torch.randn(3, 2, 4, 4))
        model(torch.randn(1, 2, 4, 4))
    assert rec.names == ["0.gate", "2.gates.0", "2.gates.1"]
    assert rec.values("0.gate").shape == (4, 2, 4, 4)
    assert rec.values(2).shape == (4, 32)


def test_lesioned_layer_is_identity():
    torch.manual_seed(0)
    for net in (Highway(6, 1), Highway(6, 1, carry="independent"), HighwayConv2d(3, 3)):
        x = torch.randn(2, 6) if isinstance(net, Highway) else torch.randn(2, 3, 5, 5)
        with lesion(net, [0]) as names:
            assert torch.equal(net(x), x)
            assert len(names) == 1
        assert not torch.equal(net(x), x)


def test_lesion_chosen_layers_only_and_recorded_as_zero():
    torch.manual_seed(0)
    net = Highway(4, 3)
    x = torch.randn(3, 4)
    with lesion(net, [1, "gates.2"]), record_gates(net) as rec:
        y = net(x)
    z = net.layers[0](x)
    t = torch.sigmoid(z[:, 4:])
    torch.testing.assert_close(y, t * torch.relu(z[:, :4]) + (1 - t) * x)
    assert torch.equal(rec.values(1), torch.zeros(3, 4))
    assert not any(g.lesioned for _, g in gate_modules(net))


def test_lesion_takes_one_layer_by_index_or_name():
    net = Highway(4, 3)
    for one, lesioned in ((1, [1]), (-1, [2]), ("gates.0", [0])):
        with lesion(net, one) as names:
            assert [net.gates[i].lesioned for i in range(3)] == [i in lesioned for i in range(3)]
            assert names == [f"gates.{i}" for i in lesioned]


def test_lesion_takes_numpy_indices_as_gate_records_values_does():
    # (the gates a user picks from recorded means, np.argsort(means)[:2], are NumPy integers: lesion
    # refused them, "layers must be gate indices (int) or names (str)", where GateRecord.values takes them)
    net = Highway(4, 3)
    for layers, lesioned in ((np.array([2, 0]), [0, 2]), (np.int64(1), [1]), (np.int32(-1), [2])):
        with lesion(net, layers) as names:
            assert [net.gates[i].lesioned for i in range(3)] == [i in lesioned for i in range(3)]
            assert names == [f"gates.{i}" for i in lesioned]
    with pytest.raises(IndexError, match="gate index 3 out of range"), lesion(net, np.array([3])):
        pass
    with pytest.raises(TypeError, match="layers must be gate indices"), lesion(net, [np.float64(1.0)]):
        pass


def test_mean_per_gate_over_calls_on_inputs_of_other_shapes():
    # (batches of sentences of other lengths, images of other sizes: mean_per_gate concatenated every call's
    # values first, and failed inside torch.cat, "Sizes of tensors must match except in dimension 0")
    torch.manual_seed(0)
    net, conv = Highway(4, 2), HighwayConv2d(3, 3)
    x, y, images = torch.randn(2, 5, 4), torch.randn(3, 7, 4), (torch.randn(1, 3, 8, 8), torch.randn(2, 3, 5, 6))
    with record_gates(net) as record, gate_means(net) as means, record_gates(conv) as conv_record:
        net(x)
        net(y)
        for image in images:
            conv(image)
    for i, name in enumerate(record.names):
        calls = record.transform[name]
        expected = torch.cat([calls[0].flatten(), calls[1].flatten()]).mean()
        torch.testing.assert_close(record.mean_per_gate()[i], expected)
        assert means[name] == pytest.approx(expected.item(), abs=1e-6)
    torch.testing.assert_close(conv_record.mean_per_gate()[0],
                               torch.cat([c.flatten() for c in conv_record.transform["gate"]]).mean())
    # values() concatenates the calls, which these do not: it says so, and where each call's values are
    with pytest.raises(ValueError, match=r"gate 'gates.0' ran on inputs of other shapes, giving values of shapes "
                                         r"\(N, 5, 4\) and \(N, 7, 4\).*record.transform\['gates.0'\]"):
        record.values(0)


def test_a_copy_of_the_model_made_while_recording_records_nothing(tmp_path):
    # (keeping the best model, or saving a checkpoint, inside record_gates: the copy's gates carried the
    # recording's observers, and its every forward, after the block too, failed with a KeyError;
    # torch.save of the model failed to pickle them)
    net = Highway(4, 2)
    x = torch.randn(3, 4)
    with record_gates(net) as rec, gate_means(net) as means:
        copy_ = copy.deepcopy(net)
        torch.save(net, tmp_path / "net.pt")
        net(x)
        assert torch.equal(copy_(x), net(x))
    assert [len(v) for v in rec.transform.values()] == [2, 2] and sorted(means) == ["gates.0", "gates.1"]
    loaded = torch.load(tmp_path / "net.pt", weights_only=False)
    assert torch.equal(loaded(x), net(x)) and torch.equal(copy_(x), net(x))
    assert all(g.is_plain for m in (net, copy_, loaded) for g in m.gates)


def _replica(module):
    """What nn.DataParallel's replicate() makes of each module (its parameters left in place rather than
    broadcast to another device): a shallow copy, which shares the gates' observers."""
    replica = module._replicate_for_data_parallel()
    replica._parameters = dict(module._parameters)
    for name, child in module._modules.items():
        replica._modules[name] = _replica(child)
    return replica


def test_the_replicas_of_nn_data_parallel_record_under_their_gates_names():
    # (the observers looked their gate up by id: a replica's gates, which share them, failed with a KeyError,
    # so that record_gates and gate_means broke an nn.DataParallel model on two or more GPUs)
    torch.manual_seed(0)
    net = Highway(4, 2)
    x = torch.randn(3, 4)
    with record_gates(net) as record, gate_means(net) as means:
        _replica(net)(x[:2])
        _replica(net)(x[2:])
    with record_gates(net) as whole:
        net(x)
    for name in record.names:
        torch.testing.assert_close(record.values(name), whole.values(name))
        assert means[name] == pytest.approx(whole.values(name).mean().item(), abs=1e-6)


def test_lesion_restores_after_exception():
    net = Highway(4, 2)
    with pytest.raises(RuntimeError, match="boom"), lesion(net, [0]):
        raise RuntimeError("boom")
    assert not net.gates[0].lesioned


def test_lesion_bad_layers():
    net = HighwayMLP(10, 2, depth=3, width=4)
    with pytest.raises(IndexError, match="gate index 5 out of range: the model has 2 gates"):
        with lesion(net, [5]):
            pass
    with pytest.raises(ValueError, match="no gate named 'x'"):
        with lesion(net, ["x"]):
            pass
    with pytest.raises(TypeError, match="model must be an nn.Module, got str 'net'"):
        gate_modules("net")


def test_gate_means_are_the_means_of_everything_recorded():
    torch.manual_seed(0)
    net = Highway(16, num_layers=3)
    x = torch.randn(40, 16)
    with record_gates(net) as record, gate_means(net) as means:
        net(x)
        net(x[:7])  # (calls of different sizes: each element weighs alike)
    assert list(means) == record.names
    assert list(means.values()) == pytest.approx(record.mean_per_gate().tolist(), abs=1e-6)
    assert not gate_modules(net)[0][1]._observers  # detached on exit


def test_recording_under_torch_func_transforms_keeps_plain_values():
    # (under vmap a gate's T is a BatchedTensor: record_gates kept it, and its first use after vmap returned
    # failed, "your tensor may have escaped from inside a function being vmapped"; gate_means failed at the
    # end of its block; grad's, jvp's and functionalize's wrappers were kept, standing for transforms gone)
    from torch.func import functional_call, functionalize, grad, jvp, vmap

    from highwaynet.training.tensorboard import GateHistograms

    torch.manual_seed(0)
    net = Highway(4, 2)
    x = torch.randn(3, 5, 4)
    with record_gates(net) as whole, GateHistograms(net) as whole_histograms:
        net(x)
    with record_gates(net) as record, gate_means(net) as means, GateHistograms(net) as histograms:
        vmap(net)(x)  # (one vmap, over the batch)
        vmap(vmap(net), in_dims=1)(x)  # (two, the outer over the second dimension: its values first)
        params = dict(net.named_parameters())
        loss = lambda p, row: functional_call(net, p, (row,)).sum()  # noqa: E731
        vmap(grad(loss), in_dims=(None, 0))(params, x)  # (per-example gradients)
        jvp(net, (x,), (torch.ones_like(x),))
        functionalize(net)(x)
    for name in record.names:
        calls = record.transform[name]
        assert not any(torch._C._functorch.is_functorch_wrapped_tensor(c) for c in calls)
        expected = whole.transform[name][0]
        for call in (calls[0], calls[2], calls[3], calls[4]):
            torch.testing.assert_close(call, expected, rtol=0, atol=1e-6)
        torch.testing.assert_close(calls[1], expected.transpose(0, 1), rtol=0, atol=1e-6)
        assert means[name] == pytest.approx(expected.mean().item(), abs=1e-6)
        torch.testing.assert_close(histograms.sums[name][:-2] / 5, whole_histograms.sums[name][:-2])
    assert record.mean_per_gate().shape == (2,)
    assert all(g.is_plain for g in net.gates)


def test_a_copy_of_the_model_made_inside_lesion_is_not_lesioned(tmp_path):
    # (a copy made inside the block, copy.deepcopy or torch.save of the model, kept the lesion after the block
    # ended, for good, where a state_dict saved there holds none: the lesion is the block's, as a recording's
    # observers are; a gate the user sets lesioned is the model's own, and its copies keep it)
    torch.manual_seed(0)
    net = Highway(4, 3)
    net.gates[2].lesioned = True
    x = torch.randn(3, 4)
    with lesion(net, [0, "gates.0"]):
        assert "TransformGate(lesioned=True)" in repr(net)
        copy_ = copy.deepcopy(net)
        torch.save(net, tmp_path / "net.pt")
        replica = _replica(net)  # (nn.DataParallel's replicas, made at each forward, are shut as the model)
        assert [g.lesioned for g in replica.gates] == [True, False, True]
        assert torch.equal(replica(x), net(x))
    loaded = torch.load(tmp_path / "net.pt", weights_only=False)
    for model in (net, copy_, loaded):
        assert [g.lesioned for g in model.gates] == [False, False, True]
        assert torch.equal(model(x), net(x))
    with lesion(copy_, 2):  # (shut already: the block ends, the gate stays shut)
        pass
    assert [g.lesioned for g in copy_.gates] == [False, False, True]


def test_a_gate_pickled_with_its_lesion_as_an_attribute_loads():
    # (before lesion() blocks were counted apart, a gate held its lesion as the attribute `lesioned`)
    gate = Highway(4, 1).gates[0]
    state = {k: v for k, v in gate.__getstate__().items() if k not in ("_lesioned", "_lesions")}
    old = type(gate).__new__(type(gate))
    old.__setstate__({**state, "lesioned": True})
    assert old.lesioned and repr(old) == "TransformGate(lesioned=True)"
    with lesion(torch.nn.Sequential(old), 0):
        pass
    assert old.lesioned


def test_record_gates_refuses_a_cuda_device_this_machine_lacks_before_the_block(monkeypatch):
    """record_gates(net, "cuda") on a machine without CUDA was torch's AssertionError ("Torch not compiled with
    CUDA enabled") at the first gate of the first forward, inside the block."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"device='cuda': this machine has no CUDA device"):
        with record_gates(Highway(4, 1), "cuda"):
            pass


def test_recording_a_model_on_the_meta_device_says_why_it_cannot():
    """On the meta device record_gates copied each gate's values to the CPU ("Cannot copy out of meta tensor;
    no data!"), and gate_means failed when the block ended (Tensor.item() on a meta tensor), hiding any error
    raised in the block; with device=None the shapes are recorded."""
    net = Highway(4, 2, device="meta")
    x = torch.randn(3, 4, device="meta")
    with pytest.raises(ValueError, match="'gates.0' ran on the meta device.*pass device=None"):
        with record_gates(net):
            net(x)
    with pytest.raises(ValueError, match="'gates.0' ran on the meta device.*gate_means has no mean"):
        with gate_means(net):
            net(x)
    with record_gates(net, device=None) as record:
        net(x)
    assert record.transform["gates.1"][0].shape == (3, 4) and record.transform["gates.1"][0].is_meta
    assert all(not gate._observers for _, gate in gate_modules(net))
