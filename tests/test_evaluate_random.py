"""Models with random ops in train mode are verified seed for seed: the float64 truth draws what eager draws,
so a candidate that draws other values fails, and one that draws the same passes."""

import textwrap

import pytest
import torch

from fuseforge.evaluate.random_draws import FORWARD_SEED, Float32Draws

MODEL = textwrap.dedent('''
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(32, 48)
            self.dropout = nn.Dropout(0.25)

        def forward(self, x):
            y = self.dropout(torch.relu(self.linear(x)))
            return y + 0.5 * torch.rand_like(y) + torch.bernoulli(torch.sigmoid(y))


    def get_inputs():
        return [torch.randn(16, 32)]


    def get_init_inputs():
        return []
''')


def _forward(model, *x):
    torch.manual_seed(FORWARD_SEED)
    with torch.no_grad():
        return model(*x)


def test_the_float64_truth_of_a_model_with_random_ops_draws_what_the_float32_run_draws():
    namespace = {}
    exec(MODEL, namespace)
    torch.manual_seed(0)
    model, x = namespace["Model"](), torch.randn(16, 32)
    eager = _forward(model, x)
    model64 = namespace["Model"]()
    model64.load_state_dict(model.state_dict())
    model64 = model64.double()
    plain = _forward(model64, x.double())  # float64 draws: other values
    with Float32Draws():
        truth = _forward(model64, x.double())
    assert truth.dtype == torch.float64
    rel = lambda a, b: ((a.double() - b).norm() / b.norm()).item()  # noqa: E731
    assert rel(eager, truth) < 1e-6  # eager is the truth, rounded to float32
    assert rel(eager, plain) > 0.05  # without the mode, the random terms differ entirely


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_verifier_passes_a_candidate_that_draws_as_eager_and_fails_one_that_draws_other_values(
        tmp_path, device):
    from fuseforge.evaluate.verify import VerifySettings, verify_files

    model = tmp_path / "model.py"
    model.write_text(MODEL)
    same = tmp_path / "same.py"
    same.write_text(MODEL + textwrap.dedent('''
        class ModelNew(Model):
            def forward(self, x):
                y = torch.ops.aten.native_dropout.default(torch.relu(self.linear(x)), 0.25, True)[0]
                return y + 0.5 * torch.rand_like(y) + torch.bernoulli(torch.sigmoid(y))
    '''))
    other = tmp_path / "other.py"
    other.write_text(MODEL + textwrap.dedent('''
        class ModelNew(Model):
            def forward(self, x):
                torch.rand(1, device=x.device)  # one extra draw shifts every later one
                return super().forward(x)
    '''))
    settings = VerifySettings(device=torch.device(device), seeds=1)
    passed, _ = verify_files(model, same, settings)
    failed, _ = verify_files(model, other, settings)
    assert passed["verdict"] == "correct", passed.get("reason")
    assert failed["verdict"] == "incorrect", failed.get("reason")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_verifiers_float64_truth_builds_tensors_without_a_dtype_and_casts_to_float32_in_float64(tmp_path, device):
    from fuseforge.evaluate.verify import VerifySettings, verify_files

    source = textwrap.dedent('''
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = nn.GRU(8, 16, batch_first=True)

            def forward(self, x):
                h0 = torch.zeros(1, x.size(0), 16, device=x.device)  # float32 by default
                return self.rnn(x.float(), h0)[1][-1].to(torch.float32)  # and casts to float32


        def get_inputs():
            return [torch.rand(3, 5, 8)]


        def get_init_inputs():
            return []


        class ModelNew(Model):
            pass
    ''')
    model = tmp_path / "model.py"
    model.write_text(source)
    record, _ = verify_files(model, model, VerifySettings(device=torch.device(device), seeds=1))
    assert record["verdict"] == "correct", record.get("reason")
    assert torch.get_default_dtype() == torch.float32


RRELU_MODEL = textwrap.dedent('''
    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    class Model(nn.Module):
        """The fuzz campaign's fuzz_040042, reduced: an rrelu in eval mode after an in-place division."""

        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(6, 11, 5, stride=3, padding=3)
            self.bias = nn.Parameter(torch.randn(11, 8))

        def forward(self, x, z):
            x = self.conv(x) / (z + 0.5)
            x /= 2.47
            return self.bias + F.rrelu(x, training=False)
''')


def test_the_float64_truth_of_an_rrelu_is_the_rrelu_not_its_input():
    """rrelu_with_noise is a random op that writes its second argument (the slopes): the mode took it for an
    in-place draw into its first and returned the input, so every truth with an rrelu lacked it (on an H200,
    fuzz_040042's eager was 7-77 % of the RMS from that truth, and the verifier's bound that loose)."""
    from fuseforge.evaluate import harness

    torch.manual_seed(0)
    x = torch.randn(1000, dtype=torch.float64)
    with Float32Draws(), harness.float64_run():
        eval_mode = torch.nn.functional.rrelu(x, training=False)
    assert torch.equal(eval_mode, torch.nn.functional.leaky_relu(x, (1 / 8 + 1 / 3) / 2))
    torch.manual_seed(FORWARD_SEED)
    eager = torch.nn.functional.rrelu(x.float(), training=True)
    torch.manual_seed(FORWARD_SEED)
    with Float32Draws(), harness.float64_run():
        truth = torch.nn.functional.rrelu(x, training=True)
    assert truth.dtype == torch.float64 and not torch.equal(truth, x)
    assert ((truth - eager.double()).abs().max() / eager.abs().max()).item() < 1e-6  # eager's slopes, in float64
    inplace = x.clone()
    torch.manual_seed(FORWARD_SEED)
    with Float32Draws(), harness.float64_run():
        same = torch.nn.functional.rrelu(inplace, training=True, inplace=True)
    assert same is inplace and ((same - eager.double()).abs().max() / eager.abs().max()).item() < 1e-6


def test_the_verifiers_truth_of_a_model_with_an_rrelu_matches_its_float32_run():
    from fuseforge.evaluate.scales import tracked_truth

    namespace = {}
    exec(RRELU_MODEL, namespace)
    torch.manual_seed(0)
    model = namespace["Model"]()
    inputs = [torch.rand(6, 6, 21), torch.rand(6, 11, 8)]
    eager = _forward(model, *[t.clone() for t in inputs])
    model64 = namespace["Model"]()
    model64.load_state_dict(model.state_dict())
    (truth,), _, _ = tracked_truth(model64.double(), inputs, torch.device("cpu"))
    assert ((eager.double() - truth).norm() / truth.norm()).item() < 1e-6  # it was 1e-1


def test_in_place_and_out_draws_put_the_float32_runs_values_into_the_callers_float64_tensors():
    torch.manual_seed(1)
    want_uniform, want_rand = torch.empty(7).uniform_(), torch.rand(7)
    into, out = torch.empty(7, dtype=torch.float64), torch.empty(7, dtype=torch.float64)
    torch.manual_seed(1)
    with Float32Draws():
        drawn = into.uniform_()
        made = torch.rand(7, out=out)
    assert drawn is into and torch.equal(into, want_uniform.double())
    assert made is out and torch.equal(out, want_rand.double())
