"""The load stage: usable model files load; unusable ones fail with one line that says why."""

import textwrap

import pytest
import torch

from fuseforge.load import LoadError, load_model_file

GOOD = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)

    def forward(self, x):
        return {ret}

def get_inputs():
    return [{inputs}]

def get_init_inputs():
    return [4]
"""


def _write(tmp_path, text, name="m.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _model(tmp_path, ret="torch.relu(self.fc(x))", inputs="torch.randn(2, 4)"):
    return _write(tmp_path, GOOD.format(ret=ret, inputs=inputs))


def test_a_good_model_file_loads_with_its_inputs_and_eager_outputs(tmp_path):
    loaded = load_model_file(_model(tmp_path))
    assert loaded.init_args == [4]
    assert loaded.inputs[0].shape == (2, 4)
    assert loaded.outputs[0].shape == (2, 4) and not loaded.output_is_tuple


def test_a_tuple_of_tensors_is_a_valid_output(tmp_path):
    loaded = load_model_file(_model(tmp_path, ret="(self.fc(x), x.sum(1))"))
    assert loaded.output_is_tuple and len(loaded.outputs) == 2


def test_loading_twice_with_one_seed_gives_the_same_weights(tmp_path):
    path = _model(tmp_path)
    a, b = load_model_file(path, seed=3), load_model_file(path, seed=3)
    assert torch.equal(a.model.fc.weight, b.model.fc.weight)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("def broken(:\n    pass\n", r"m\.py:1: syntax error"),
        ("import torch\ndef get_inputs(): return []\ndef get_init_inputs(): return []\n", "missing Model"),
        ("import not_a_module_anywhere\n", "importing the file raised ModuleNotFoundError"),
        ("class Model: pass\ndef get_inputs(): return []\ndef get_init_inputs(): return []\n",
         "not a subclass of torch.nn.Module"),
    ],
    ids=["syntax error", "missing Model", "import error", "Model not a module"],
)
def test_an_unusable_file_fails_with_a_one_line_reason(tmp_path, text, expected):
    with pytest.raises(LoadError, match=expected) as info:
        load_model_file(_write(tmp_path, text))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("ret", "inputs", "expected"),
    [
        ("x[:, 100] + self.fc(x)", "torch.randn(2, 4)", r"m\.py:\d+: Model.forward raised IndexError"),
        ("3", "torch.randn(2, 4)", "returned int; expected a tensor or a tuple of tensors"),
        ("(x, 3)", "torch.randn(2, 4)", "returned tuple of Tensor, int"),
        ("self.fc(x)", "torch.randn(0, 4)", "input 0 from get_inputs\\(\\) has zero elements"),
        ("self.fc(x)", "'text'", "input 0 from get_inputs\\(\\) is a str"),  # numbers are inputs; text is not
    ],
    ids=["forward raises", "int output", "mixed tuple", "zero-size input", "non-tensor input"],
)
def test_a_model_that_cannot_run_fails_with_a_one_line_reason(tmp_path, ret, inputs, expected):
    with pytest.raises(LoadError, match=expected) as info:
        load_model_file(_model(tmp_path, ret=ret, inputs=inputs))
    assert "\n" not in str(info.value)


def test_a_missing_file_is_a_load_error(tmp_path):
    with pytest.raises(LoadError, match="no such file"):
        load_model_file(tmp_path / "absent.py")
