"""Half of the development set (the odd places in sorted order) through the CPU-side stages: the default
plan is kept and matches the model in float64; its kernels compile for Hopper;
its generated code is the committed one (`tests/golden/`)."""

from kernelbench_cases import bind_half

run, test_each_problem_keeps_the_default_plan_and_matches_the_model_in_float64, \
    test_each_problems_kernels_compile_for_hopper, test_each_problems_generated_code_is_the_committed_one = \
    bind_half(1)
