"""Suite jobs: which files become jobs, what identifies a job, how commands are spelled."""

import sys
from pathlib import Path

from fuseforge.suite.fake_job import write_model
from fuseforge.suite.jobs import OPTIMIZE_RUN, SuiteConfig, candidate_files, candidates_of, model_files, plan


def _candidate(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"class ModelNew:  # {path.name}\n    pass\n")
    return path


def test_model_files_are_found_recursively_and_helpers_and_hidden_folders_are_left_out(tmp_path):
    write_model(tmp_path / "seed" / "a.py")
    write_model(tmp_path / "dev" / "deep" / "b.py")
    write_model(tmp_path / "_private.py")
    write_model(tmp_path / ".cache" / "c.py")
    (tmp_path / "helper.py").write_text("def get_inputs():\n    return []\n")  # no Model: not a model file
    assert [p.name for p in model_files(tmp_path)] == ["b.py", "a.py"]


def test_a_candidate_belongs_to_the_model_whose_whole_name_it_starts_with(tmp_path):
    gemm, gemm_gelu = tmp_path / "gemm.py", tmp_path / "gemm_gelu.py"
    cands = [_candidate(tmp_path / "c" / n) for n in ("gemm.py", "gemm.answer_1.py", "gemm_gelu.answer_2.py")]
    assert [c.name for c in candidates_of(gemm, cands)] == ["gemm.py", "gemm.answer_1.py"]
    assert [c.name for c in candidates_of(gemm_gelu, cands)] == ["gemm_gelu.answer_2.py"]


def test_check_jobs_pair_each_model_with_each_of_its_candidates_and_models_without_one_get_none(tmp_path):
    write_model(tmp_path / "m" / "gemm.py")
    write_model(tmp_path / "m" / "conv.py")
    for name in ("gemm.answer_1.py", "gemm.answer_2.py"):
        _candidate(tmp_path / "c" / name)
    (tmp_path / "c" / "notes.py").write_text("x = 1\n")  # no ModelNew: not a candidate
    assert len(candidate_files(tmp_path / "c")) == 2
    jobs = plan(SuiteConfig(models=tmp_path / "m", candidates=tmp_path / "c", db=tmp_path / "r.sqlite"), gpus=1)
    assert sorted(j.name for j in jobs) == ["gemm / gemm.answer_1.py", "gemm / gemm.answer_2.py"]
    assert {j.kind for j in jobs} == {"check"}
    assert len({j.out_dir for j in jobs}) == 2


def test_a_job_key_follows_the_file_contents_and_the_settings_not_the_file_name(tmp_path):
    def key(models: Path, gpus: int = 1, **kw) -> str:
        [job] = plan(SuiteConfig(models=models, db=tmp_path / "r.sqlite", **kw), gpus=gpus)
        return job.key

    first = key(write_model(tmp_path / "a" / "m.py", speedup=2))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "renamed.py").write_bytes((tmp_path / "a" / "m.py").read_bytes())
    assert key(tmp_path / "b" / "renamed.py") == first
    assert key(write_model(tmp_path / "c" / "m.py", speedup=3)) != first
    assert key(tmp_path / "a" / "m.py", gpus=0) != first  # a CPU-only run is other work than a GPU run
    assert key(tmp_path / "a" / "m.py", run_command="{python} other.py {model}") != first


def test_identical_model_files_make_one_job(tmp_path):
    write_model(tmp_path / "x" / "m.py")
    write_model(tmp_path / "y" / "m.py")
    write_model(tmp_path / "y" / "other.py")
    assert len(plan(SuiteConfig(models=tmp_path, db=tmp_path / "r.sqlite"), gpus=1)) == 2


def test_command_templates_fill_the_placeholders_and_drop_words_that_format_to_nothing(tmp_path):
    [job] = plan(SuiteConfig(models=write_model(tmp_path / "m.py"), db=tmp_path / "r.sqlite"), gpus=1)
    assert job.argv(OPTIMIZE_RUN) == [sys.executable, "-m", "fuseforge", "optimize", str(job.model), "-o",
                                      str(job.out_dir)]
    assert job.argv(OPTIMIZE_RUN + " {no_compile}", no_gpu=True, no_compile=True)[-2:] == ["--no-gpu", "--no-compile"]
    # the default optimize command times every baseline the evaluator's cache does not have
    assert job.argv(OPTIMIZE_RUN, no_gpu=True, no_compile=True)[-1] == "--no-gpu"
    assert job.argv("'{python}' -c 'print(1)' {model}") == [sys.executable, "-c", "print(1)", str(job.model)]
