"""The rewrite stage on every problem model: identities fire only where they apply, and the result is exact.

Models are built and captured without the eager forward at full size (capture only traces shapes).
"""

import pytest
import torch
from conftest import ALL_MODELS

from fuseforge.capture import capture
from fuseforge.evaluate.cpu_check import check_on_cpu, float64_reference
from fuseforge.load import LoadedModel, import_model_file
from fuseforge.partition import partition
from fuseforge.rewrite import rewrite

CHANGED = {
    "gemm_divide_sum_scaling": ["scalar_out_of_reduction", "reduce_the_weight_not_the_output"],
    "gemm_mean_tanh": ["reduce_the_weight_not_the_output"],
    "linear_chain_no_activation": ["compose_linear_maps"],
    "conv2d_avgpool_linear": ["global_average_pool_of_conv", "views_that_cancel", "compose_linear_maps"],
    "conv2d_batchnorm_relu": ["conv_bias_as_channel_add"],
    "conv2d_channelmin_tanh": ["conv_bias_as_channel_add"],
    "conv2d_groupnorm_hardswish": ["conv_bias_as_channel_add"],
    "convtranspose2d_bias_tanh_scale": ["conv_bias_as_channel_add"],
    "conv3d_maxpool_sigmoid_sum": ["conv_bias_as_channel_add", "max_pool_of_channel_shift"],
}
MOVES_ONLY = {"conv_bias_as_channel_add"}  # moves work to where a kernel fuses it; removes none itself


def _loaded(path) -> LoadedModel:
    module = import_model_file(path)
    init = module.get_init_inputs()
    torch.manual_seed(0)
    model = module.Model(*init)
    return LoadedModel(path, path.read_text(), module, model, list(init), module.get_inputs(), [], False)


def _ops(graph) -> list[str]:
    return [str(n.target) for n in graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("path", ALL_MODELS, ids=[p.stem for p in ALL_MODELS])
def test_a_problem_model_changes_only_where_an_identity_applies_and_stays_exact_in_float64(path):
    loaded = _loaded(path)
    c = capture(loaded)
    before = _ops(c.graph)
    log = rewrite(c.graph, c)
    if path.stem not in CHANGED:
        assert [f.rule for f in log.firings] == [] and _ops(c.graph) == before
        return
    assert [f.rule for f in log.firings] == CHANGED[path.stem]
    assert _ops(c.graph) != before
    assert all(f.flops_removed >= 0 and f.bytes_removed >= 0 for f in log.firings)
    assert sum(f.flops_removed for f in log.firings) > 0 or {f.rule for f in log.firings} <= MOVES_ONLY
    check = check_on_cpu(c, partition(c.graph), float64_reference(loaded, c))
    assert check.passed, check.detail
