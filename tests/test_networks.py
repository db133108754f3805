"""Whole-model tuning: built-in networks, workloads from torch.fx, ``pypto-tune network``."""

import json
import os
import subprocess
import sys

import pytest

import autotune as at
import pypto as pt
from autotune.networks import NETWORKS, network_workloads
from autotune.workloads import WorkloadError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_resnet18_conv_workloads_and_weights():
    ws = network_workloads("resnet18")
    convs = [w for w in ws if w.template.startswith("conv2d_nchw")]
    assert len(convs) == 11 and len({w.args for w in convs}) == 11
    winograd = {w.args for w in convs if w.template == "conv2d_nchw_winograd"}
    assert winograd == {(1, 64, 56, 56, 64, 3, 3, 1, 1), (1, 128, 28, 28, 128, 3, 3, 1, 1)}
    assert sum(w.weight for w in convs) == 20  # stem + 16 block convs + 3 downsamples
    by_args = {w.args: w.weight for w in convs}
    assert by_args[(1, 3, 224, 224, 64, 7, 7, 2, 3)] == 1  # 7x7 stride-2 stem
    assert by_args[(1, 64, 56, 56, 64, 3, 3, 1, 1)] == 4
    assert by_args[(1, 256, 14, 14, 512, 1, 1, 2, 0)] == 1  # a 1x1 stride-2 downsample
    assert [w.args for w in ws if w.template == "matmul"] == [(1, 1000, 512)]
    labels = [w.label for w in ws]
    assert len(set(labels)) == len(labels)  # the 3x3 and 1x1 stride-2 layers read apart
    assert "conv2d 64->128 56x56 1x1 s2" in labels and "conv2d 64->128 56x56 s2" in labels


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

    ws, missing = from_torch_module(*_small_model(), target="x86-avx512")  # 8 x 8: direct
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


def test_from_torch_module_takes_winograd_where_the_target_fills_its_vectors():
    """3 x 3 stride-1 convolutions go to ``conv2d_nchw_winograd`` where its tiles fill the
    target's vectors (``winograd_pays``); other filters, strides and images stay direct."""
    torch = pytest.importorskip("torch")
    from torch import nn

    from autotune.fx_workloads import from_torch_module
    from autotune.templates.winograd import winograd_pays

    class Convs(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv2d(8, 8, 3, padding=1)  # 28 x 28
            self.b = nn.Conv2d(8, 8, 3, stride=2, padding=1)  # -> 14 x 14, stride 2
            self.c = nn.Conv2d(8, 8, 3, padding=1)  # 14 x 14
            self.d = nn.Conv2d(8, 8, 1)  # 1 x 1

        def forward(self, x):
            return self.d(self.c(self.b(self.a(x))))

    x = (torch.randn(1, 8, 28, 28),)
    templates = {
        name: [(w.template, w.args[2]) for w in from_torch_module(Convs(), x, target=name)[0]]
        for name in ("x86-avx512", "x86-avx2")
    }
    assert templates["x86-avx512"] == [  # 16 lanes: c's 7 tiles per row pad to 16
        ("conv2d_nchw_winograd", 28), ("conv2d_nchw", 28), ("conv2d_nchw", 14),
        ("conv2d_nchw", 14),
    ]  # fmt: skip
    assert templates["x86-avx2"] == [
        ("conv2d_nchw_winograd", 28), ("conv2d_nchw", 28), ("conv2d_nchw_winograd", 14),
        ("conv2d_nchw", 14),
    ]  # fmt: skip
    # the built-in resnet18 follows the same rule on 16 lanes
    for w in network_workloads("resnet18"):
        if w.template.startswith("conv2d_nchw"):
            assert (w.template == "conv2d_nchw_winograd") == winograd_pays(w.args, 16), w


def test_from_torch_module_refuses_a_non_module():
    pytest.importorskip("torch")
    from autotune.fx_workloads import from_torch_module

    with pytest.raises(TypeError, match="expected a torch.nn.Module"):
        from_torch_module(lambda x: x, ())


def _tune(*args, home, **env_vars):
    env = dict(os.environ, PYPTO_HOME=str(home), **env_vars)
    return subprocess.run(
        [sys.executable, "-m", "autotune", "network", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _report_line(stdout, label):
    """The report's cells after ``label`` (the report follows the scheduler's table)."""
    report = stdout.split("against PyTorch eager", 1)[1]
    line = next(x for x in report.splitlines() if x.startswith(label + " "))
    return line[len(label) :].split()


def test_network_cli_tunes_a_file_then_reports_from_the_logs(tmp_path):
    pytest.importorskip("torch")
    f = tmp_path / "net.json"
    f.write_text(
        json.dumps(
            [
                {"template": "matmul", "args": [32, 32, 32], "weight": 3},
                {"template": "softmax", "args": [64, 64]},
                {"template": "matmul", "args": [32, 32, 32]},  # merged: weight 4
            ]
        )
    )
    quick = ["--round", "2", "--confirm", "0", "--no-progress", "--number", "2", "--repeat", "2"]
    p = _tune(str(f), "--trials", "6", "--tuner", "random", *quick, home=tmp_path)
    assert p.returncode == 0, p.stderr
    recs = at.load_records(str(tmp_path / "logs" / "matmul.jsonl"))
    recs += at.load_records(str(tmp_path / "logs" / "softmax.jsonl"))
    assert len(recs) == 6 and all(r.ok for r in recs)
    best = at.best_by_workload(recs)
    mm = next(r for (key, _), r in best.items() if json.loads(key)[0] == "matmul")
    n_mm = str(sum(r.template == "matmul" for r in recs))
    # weight, trials and best ms from the log
    assert _report_line(p.stdout, "matmul 32^3")[:3] == ["4", n_mm, f"{mm.cost * 1e3:.4g}"]
    # PyTorch eager's ms, marked "~" where its timings spread (a busy machine)
    assert float(_report_line(p.stdout, "matmul 32^3")[3].rstrip("~")) > 0
    assert _report_line(p.stdout, "model (sum weight x time)")[-1].endswith("x")

    r = _tune(str(f), "--report-only", home=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "tuning" not in r.stdout  # nothing measured
    assert _report_line(r.stdout, "matmul 32^3")[:3] == ["4", n_mm, f"{mm.cost * 1e3:.4g}"]
    assert len(at.load_records(str(tmp_path / "logs" / "matmul.jsonl"))) == len(
        [x for x in recs if x.template == "matmul"]
    )
    # PyTorch runs with the threads pypto's records were measured with (not this
    # process's OMP_NUM_THREADS: the report had compared 1-thread records with 2-thread
    # PyTorch), unless told otherwise
    (ran,) = {x.threads for x in recs if x.ok}
    other = _tune(str(f), "--report-only", home=tmp_path, OMP_NUM_THREADS=str(ran + 1))
    assert f"against PyTorch eager ({ran} thread(s))" in other.stdout, other.stderr
    three = _tune(str(f), "--report-only", "--torch-threads", "3", home=tmp_path)
    assert "against PyTorch eager (3 thread(s))" in three.stdout, three.stderr


def test_report_only_without_logs_exits_1(tmp_path):
    # a log directory of its own: no shipped records stand in
    r = _tune("bert-base-layer", "--report-only", "--log-dir", str(tmp_path / "l"), home=tmp_path)
    assert r.returncode == 1 and "pypto ms" in r.stdout
    assert "without both times are left out" in r.stdout
    n = len(network_workloads("bert-base-layer"))
    assert r.stderr.startswith(f"pypto-tune: {n} workload(s) have no valid record in the logs: ")


def test_report_with_the_user_store_falls_back_on_the_shipped_records(
    tmp_path, monkeypatch, capsys
):
    """As ``apply_history_best`` does: a workload without a record in the user's store
    shows the shipped record pypto runs it with, marked as measured elsewhere; the user's
    own record wins, and a log directory of one's own reads no shipped records."""
    from autotune import cli, store

    f = tmp_path / "net.json"
    f.write_text(json.dumps([{"template": "matmul", "args": [16, 16, 16]},
                             {"template": "matmul", "args": [16, 32, 16]},
                             {"template": "softmax", "args": [8, 16]}]))  # fmt: skip
    target = pt.Target("host").key
    shipped = tmp_path / "shipped.jsonl"
    for n, cost in ((16, 2e-3), (32, 3e-3)):
        cfg = at.Task("matmul", (16, n, 16)).config_space.get(0).to_json()
        at.append_records(
            str(shipped), [at.Record(at.workload_key("matmul", [16, n, 16]), target, cfg, [cost])]
        )
    mine = at.Task("matmul", (16, 32, 16)).config_space.get(1).to_json()
    at.append_records(
        str(tmp_path / "home" / "logs" / "matmul.jsonl"),
        [at.Record(at.workload_key("matmul", [16, 32, 16]), target, mine, [5e-3])],
    )
    monkeypatch.setenv("PYPTO_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(store, "shipped_logs", lambda t=None: [str(shipped)])
    assert cli.main(["network", str(f), "--report-only"]) == 1  # softmax has none
    out = capsys.readouterr().out
    assert _report_line(out, "matmul 16^3")[2] == "2*"  # weight, trials, pypto ms
    assert _report_line(out, "matmul 16x32x16")[2] == "5"
    assert "* a shipped record: measured where the package was made, not here" in out
    assert cli.main(["network", str(f), "--report-only", "--log-dir", str(tmp_path / "d")]) == 1
    out = capsys.readouterr().out
    assert "*" not in out.split("against PyTorch eager", 1)[1]


def test_a_budget_the_logs_spent_already_says_why_a_workload_is_left_untuned(tmp_path):
    f = tmp_path / "net.json"
    f.write_text(json.dumps([{"template": "matmul", "args": [16, 16, 16], "weight": 2},
                             {"template": "softmax", "args": [8, 16]}]))  # fmt: skip
    key = at.workload_key("matmul", [16, 16, 16])
    space = at.Task("matmul", (16, 16, 16)).config_space
    at.append_records(
        str(tmp_path / "logs" / "matmul.jsonl"),
        [at.Record(key, space.target.key, space.get(i).to_json(), [1e-5]) for i in range(4)],
    )
    r = _tune(str(f), "--trials", "4", "--confirm", "0", "--no-progress", home=tmp_path)
    assert r.returncode == 1
    assert r.stderr.strip().endswith(
        "pypto-tune: 1 workload(s) have no valid record in the logs after this run (the "
        "logs' trials count toward --trials: raise it, or give --minutes; or every candidate "
        "failed: see the table): softmax 8x16"
    ), r.stderr


def test_the_untuned_hint_follows_the_budget_given(capsys):
    """Was: after a --minutes run the hint said to give --minutes."""
    import argparse

    from autotune.commands.tune_all import untuned_status

    rows = [{"label": "softmax 8x16", "best_s": None}, {"label": "m", "best_s": 1e-3}]
    for minutes, trials, hint in [(0.1, None, "the minutes ran out first: give more --minutes"),
                                  (None, 4, "raise it, or give --minutes"),
                                  (0.1, 4, "raise --trials or --minutes")]:  # fmt: skip
        assert untuned_status(rows, argparse.Namespace(minutes=minutes, trials=trials)) == 1
        err = capsys.readouterr().err
        assert hint in err and err.strip().endswith("see the table): softmax 8x16"), err
    assert untuned_status(rows[1:], argparse.Namespace(minutes=1, trials=None)) == 0


def test_report_table_totals_weight_times_time():
    from autotune.commands.network import report_table

    rows = [
        {"label": "a", "weight": 2.0, "trials": 5, "best_s": 1e-3, "torch_s": 3e-3},
        {"label": "b", "weight": 1.0, "trials": 2, "best_s": 2e-3, "torch_s": 2e-3},
        {"label": "c", "weight": 1.0, "trials": 0, "best_s": None, "torch_s": 1e-3},
    ]
    lines = report_table(rows).splitlines()
    assert lines[1].split() == ["a", "2", "5", "1", "3", "3.00x"]
    assert lines[3].split() == ["c", "1", "0", "-", "1", "-"]
    assert lines[4].split()[-4:] == ["7", "4", "8", "2.00x"]  # 2*1+1*2 ms against 2*3+1*2 ms
    assert "1 workload(s) without both times" in lines[5]
    rows[1]["noisy"] = True  # PyTorch's timings of b spread: marked, and said why
    lines = report_table(rows).splitlines()
    assert lines[2].split()[-2:] == ["2~", "1.00x"]
    assert "~ PyTorch's timings spread past 1.5x: the machine was busy" in lines[5]


def test_report_rows_flag_spread_timings(monkeypatch):
    from autotune.commands import network

    ws = network.network_workloads("resnet18")[:2]
    tasks = network.tasks_of(ws, pt.Target("generic"))
    spreads = iter([[1e-3, 1.1e-3, 1.2e-3], [1e-3, 2e-3, 5e-3]])
    monkeypatch.setattr(network, "_eager", lambda: lambda w, threads: next(spreads))
    rows = network.report_rows(ws, tasks, [])
    assert [(r["torch_s"], r["noisy"]) for r in rows] == [(1.1e-3, False), (2e-3, True)]


@pytest.mark.parametrize("command", ["network resnet18", "all", "tune matmul --args 8,8,8"])
def test_ray_without_ray_installed_is_refused(monkeypatch, capsys, command):
    from autotune import cli
    from autotune.commands import common

    monkeypatch.setattr(common, "_ray_installed", lambda: False)
    assert cli.main([*command.split(), "--trials", "1", "--ray", "auto"]) == 2
    err = capsys.readouterr().err
    assert "--ray auto: ray is not installed; install the distributed extra" in err
    assert "pip install 'pypto[distributed]'" in err


@pytest.mark.parametrize(
    "argv, message",
    [(["resnet19", "--trials", "1"], "no network 'resnet19'"),
     (["resnet18"], "give a budget"),
     (["resnet18", "--trials", "1", "--torch-threads", "0"], "--torch-threads must be positive")],
)  # fmt: skip
def test_network_cli_refusals(capsys, argv, message):
    from autotune import cli

    assert cli.main(["network", *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_network_file_with_an_empty_workload_is_refused(tmp_path, capsys):
    from autotune import cli

    f = tmp_path / "net.json"
    f.write_text('[{"template": "matmul", "args": [0, 1, 1]}]')
    assert cli.main(["network", str(f), "--trials", "2", "--log-dir", str(tmp_path / "d")]) == 2
    assert "workload matmul 0x1x1: an empty workload" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()  # nothing measured


@pytest.mark.parametrize("command", [["network", "resnet18"], ["all", "--only", "matmul"]])
@pytest.mark.parametrize(
    "extra, message",
    [(["--log", "{tmp}"], "--log {tmp} is a directory"),
     (["--log-dir", "{tmp}/afile"], "--log-dir {tmp}/afile is a file, not a directory"),
     (["--log-dir", "{tmp}/afile/sub"], "afile is a file, not a directory")],
)  # fmt: skip
def test_log_paths_are_refused_before_measuring(tmp_path, capsys, command, extra, message):
    """``network`` and ``all`` check their logs as ``tune`` does: one line, exit 2, and
    nothing measured (no log written anywhere)."""
    from autotune import cli

    (tmp_path / "afile").write_text("")
    extra = [e.replace("{tmp}", str(tmp_path)) for e in extra]
    assert cli.main([*command, "--trials", "1", *extra]) == 2
    err = capsys.readouterr().err
    assert message.replace("{tmp}", str(tmp_path)) in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def _bert_layer():
    torch = pytest.importorskip("torch")
    nn, F = torch.nn, torch.nn.functional

    class Layer(nn.Module):  # one BERT-base encoder layer, post-norm
        def __init__(self, d=768, heads=12, ff=3072):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.up, self.act, self.down = nn.Linear(d, ff), nn.GELU(), nn.Linear(ff, d)
            self.heads = heads

        def split(self, t):  # 1 x S x d -> 1 x heads x S x d/heads
            return t.view(1, 128, self.heads, -1).transpose(1, 2)

        def forward(self, x):
            a = F.scaled_dot_product_attention(
                self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
            )
            x = self.ln1(x + self.o(a.transpose(1, 2).reshape(1, 128, 768)))
            return self.ln2(x + self.down(self.act(self.up(x))))

    return Layer(), (torch.randn(1, 128, 768),)


def test_from_torch_module_of_a_bert_layer_is_the_builtin_network():
    from autotune.fx_workloads import from_torch_module

    ws, missing = from_torch_module(*_bert_layer())
    got = {(w.template, w.args): w.weight for w in ws}
    want = {(w.template, w.args): w.weight for w in network_workloads("bert-base-layer")}
    assert got == want  # the up projection and its GELU fused into dense_bias_gelu
    assert missing == {"view": 3, "transpose": 4, "reshape": 1, "add": 2}


def test_from_torch_module_maps_grouped_query_attention_as_the_operator_calls_it():
    """SDPA with fewer key/value heads (``enable_gqa``), more keys than queries and a
    value dim of its own: the attention workload ``torch.ops.pypto.attention`` runs."""
    torch = pytest.importorskip("torch")
    from autotune.fx_workloads import from_torch_module
    from autotune.templates.attention import sdpa_parts

    F = torch.nn.functional

    class Gqa(torch.nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    q, k, v = torch.randn(1, 8, 6, 16), torch.randn(1, 2, 10, 16), torch.randn(1, 2, 10, 4)
    ws, _ = from_torch_module(Gqa(), (q, k, v))
    (part,) = sdpa_parts(1, 8, 6, 16, 2, 10, 4, True, None, "float32")
    assert [(w.template, w.args) for w in ws] == [("attention", part[2])]
    assert part[2] == (1, 8, 6, 16, True, None, "float32", None, 10, False, 4, 2)

    class Padded(torch.nn.Module):  # a padding mask over the keys, as BERT's
        def forward(self, q, k, v, m):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True)

    m = torch.rand(1, 1, 1, 10) < 0.5
    ws, _ = from_torch_module(Padded(), (q, k, v, m))
    assert [w.args for w in ws] == [(1, 8, 6, 16, False, None, "float32", 10, None, False, 4, 2,
                                     "bool:b11k")]  # fmt: skip

    # causal with fewer keys than queries: the operator's two calls, two workloads
    ws, missing = from_torch_module(Gqa(), (torch.randn(1, 8, 12, 16), k, v))
    parts = sdpa_parts(1, 8, 12, 16, 2, 10, 4, True, None, "float32")
    assert [(w.template, w.args) for w in ws] == [("attention", p[2]) for p in parts]
    assert [p[:2] for p in parts] == [(0, 10), (10, 12)] and missing == {}


def test_gelu_fuses_only_after_a_linear_with_bias():
    torch = pytest.importorskip("torch")
    from autotune.fx_workloads import from_torch_module

    nn = torch.nn
    model = nn.Sequential(
        nn.Linear(16, 32, bias=False), nn.GELU(), nn.Linear(32, 8), nn.GELU("tanh")
    )
    ws, missing = from_torch_module(model, (torch.randn(4, 16),))
    assert [(w.template, w.args) for w in ws] == [
        ("matmul", (4, 32, 16)),
        ("gelu", (4, 32)),
        ("matmul", (4, 8, 32)),  # the tanh GELU is not dense_bias_gelu's exact one
        ("gelu", (4, 8, "tanh")),
    ]
    assert missing == {}
    for w in ws:
        assert at.Task(w.template, w.task_args, target="host").flop > 0
