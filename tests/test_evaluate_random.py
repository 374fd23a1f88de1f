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


def _forward(model, x):
    torch.manual_seed(FORWARD_SEED)
    with torch.no_grad():
        return model(x)


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
