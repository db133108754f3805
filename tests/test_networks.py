"""Whole-model tuning: built-in networks, workloads from torch.fx, ``pypto-tune network``."""

import pytest

import autotune as at
from autotune.networks import NETWORKS, network_workloads
from autotune.workloads import WorkloadError


def test_resnet18_conv_workloads_and_weights():
    ws = network_workloads("resnet18")
    convs = [w for w in ws if w.template == "conv2d_nchw"]
    assert len(convs) == 11 and len({w.args for w in convs}) == 11
    assert sum(w.weight for w in convs) == 20  # stem + 16 block convs + 3 downsamples
    by_args = {w.args: w.weight for w in convs}
    assert by_args[(1, 3, 224, 224, 64, 7, 7, 2, 3)] == 1  # 7x7 stride-2 stem
    assert by_args[(1, 64, 56, 56, 64, 3, 3, 1, 1)] == 4
    assert by_args[(1, 256, 14, 14, 512, 1, 1, 2, 0)] == 1  # a 1x1 stride-2 downsample
    assert [w.args for w in ws if w.template == "matmul"] == [(1, 1000, 512)]


def test_bert_layer_weights():
    ws = {(w.template, w.args): w.weight for w in network_workloads("bert-base-layer")}
    assert ws[("matmul", (128, 768, 768))] == 4
    assert ws[("layernorm", (128, 768))] == 2
    assert ws[("dense_bias_gelu", (128, 3072, 768))] == 1


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_every_builtin_entry_fits_its_template(name):
    for w in network_workloads(name):
        task = at.Task(w.template, w.task_args, target="host")
        assert task.flop > 0, w.label


def test_unknown_network_is_refused():
    with pytest.raises(WorkloadError, match="no network 'resnet19'.*resnet18, bert-base-layer"):
        network_workloads("resnet19")


def _small_model():
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class Small(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(3, 8, 3, padding=1)
            self.c2 = nn.Conv2d(8, 8, 3, padding=1)
            self.c3 = nn.Conv2d(8, 8, 3, padding=1)
            self.dw = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8)
            self.dil = nn.Conv2d(8, 8, 3, padding=2, dilation=2)
            self.ln = nn.LayerNorm(16)
            self.fc = nn.Linear(16, 10)

        def forward(self, x):
            x = torch.relu(self.c1(x))
            x = self.c3(self.c2(x)).relu()
            x = self.dil(self.dw(x)).flatten(2)  # 1 x 8 x 16
            q = self.ln(x).view(1, 1, 8, 16)
            a = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
            return torch.softmax(self.fc(x), -1), a @ a.transpose(-1, -2)

    return Small(), (torch.randn(1, 3, 8, 8),)


def test_from_torch_module_maps_ops_and_merges_duplicates():
    from autotune.fx_workloads import from_torch_module

    ws, missing = from_torch_module(*_small_model())
    assert [(w.template, w.args, w.weight) for w in ws] == [
        ("conv2d_nchw", (1, 3, 8, 8, 8, 3, 3, 1, 1), 1.0),
        ("conv2d_nchw", (1, 8, 8, 8, 8, 3, 3, 1, 1), 2.0),  # c2 and c3: one workload
        ("depthwise_conv2d_nchw", (1, 8, 8, 8, 3, 3, 2, 1), 1.0),
        ("layernorm", (8, 16), 1.0),
        ("attention", (1, 1, 8, 16, True), 1.0),
        ("matmul", (8, 10, 16), 1.0),
        ("softmax", (8, 10), 1.0),
        ("batch_matmul", (1, 8, 8, 16), 1.0),
    ]
    assert missing == {
        "relu": 2,
        "Conv2d (dilation 2)": 1,
        "flatten": 1,
        "view": 1,
        "transpose": 1,
    }
    for w in ws:  # every extracted workload fits its template
        assert at.Task(w.template, w.task_args, target="host").flop > 0


def test_from_torch_module_refuses_a_non_module():
    pytest.importorskip("torch")
    from autotune.fx_workloads import from_torch_module

    with pytest.raises(TypeError, match="expected a torch.nn.Module"):
        from_torch_module(lambda x: x, ())
