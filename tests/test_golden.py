"""The committed digests of generated code (`tests/golden/`) cover every problem model and nothing else, and a
change to one generated file shows."""

import pytest
from golden_digests import (
    ARTEFACTS,
    FOLDERS,
    GOLDEN,
    PROBLEMS,
    assert_the_generated_code_is_the_committed_one,
    generate,
    golden_file,
    problem_models,
)


def test_every_problem_model_of_every_folder_has_committed_digests_and_every_digest_file_a_model():
    models = problem_models()
    assert {p.parent.name for p in models} == set(FOLDERS), f"problem folders missing under {PROBLEMS}"
    assert sorted(golden_file(m) for m in models) == sorted(GOLDEN.glob("*/*.sha256"))


def test_each_digest_file_names_the_plan_the_kernels_the_binding_and_the_model_new_file():
    for path in GOLDEN.glob("*/*.sha256"):
        lines = path.read_text().splitlines()
        assert [line.split("  ")[1] for line in lines] == list(ARTEFACTS), path
        assert all(len(line.split("  ")[0]) == 64 for line in lines), path


@pytest.fixture(scope="module")
def seed_output(tmp_path_factory):
    model = problem_models()[0]
    out = tmp_path_factory.mktemp(model.stem)
    generate(model, out)
    return model, out


@pytest.mark.parametrize("changed", ARTEFACTS)
def test_one_byte_added_to_any_generated_file_fails_the_comparison(seed_output, changed):
    model, out = seed_output
    assert_the_generated_code_is_the_committed_one(model, out)  # as generated, it is the committed code
    original = (out / changed).read_bytes()
    try:
        (out / changed).write_bytes(original + b"\n")
        with pytest.raises(AssertionError, match=f"generated {changed} changed"):
            assert_the_generated_code_is_the_committed_one(model, out)
    finally:
        (out / changed).write_bytes(original)
