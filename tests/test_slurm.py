"Slurm submission and papermill: the generated sbatch text, submission with a stand-in sbatch, parameters tags, and a papermill run of 07_scaling."
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import papermill
import pytest
import yaml

from sgatlin_nb.slurm import sbatch_script, submit, sweep_tasks
from sgatlin_nb.runs import RunError

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / "nbs"
SCALING = NBS / "07_scaling.ipynb"


def _tasks(run_dir):
    return sweep_tasks(SCALING, {"run_full": True, "paper_results_path": "{task_dir}/r.json"},
                       {"paper_scales": [2, 5], "paper_budgets": [1e17]}, run_dir)


def test_sbatch_text(tmp_path):
    tasks = _tasks(tmp_path)
    text = sbatch_script(SCALING, tasks, run_dir=tmp_path, job_name="iso", nodes=2, gpus_per_node=4,
                         time="02:00:00", account="lab", setup="module load cuda")
    for line in ["#SBATCH --job-name=iso", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=4",
                 "#SBATCH --time=02:00:00", "#SBATCH --account=lab", "#SBATCH --array=0-1",
                 f"#SBATCH --output={tmp_path}/%a/slurm-%A_%a.log", "module load cuda", "export XLA_PYTHON_CLIENT_PREALLOCATE=false"]:
        assert line in text.splitlines(), line
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    srun = [l for l in text.splitlines() if l.startswith("srun ")]
    assert len(srun) == 1
    args = shlex.split(srun[0])
    inner = args[args.index("-c") + 1]
    assert inner.startswith(f"papermill {SCALING}") and "--kernel python3" in inner and f"--cwd {NBS}" in inner
    assert '"$0/executed-$SLURM_PROCID.ipynb"' in inner and '> "$0/papermill-$SLURM_PROCID.log"' in inner
    assert args[-2:] == ["$TASK_DIR", "$PARAMS"]
    params = [yaml.safe_load(shlex.split(m)[0]) for m in re.findall(r"PARAMS=(.*) ;;", text)]
    assert params == tasks
    assert params[1] == {"run_full": True, "paper_results_path": f"{tmp_path}/1/r.json", "paper_scales": [5], "paper_budgets": [1e17]}
    assert isinstance(params[0]["paper_budgets"][0], float)


def test_startup_file_runs_before_the_notebook(tmp_path):
    "The script's IPython startup file (which initialises jax.distributed) runs in the kernel before the first cell."
    text = sbatch_script(SCALING, _tasks(tmp_path)[:1], run_dir=tmp_path, job_name="iso")
    printf = next(l for l in text.splitlines() if l.startswith("printf "))
    ipy = tmp_path / "ipython"
    (ipy / "profile_default" / "startup").mkdir(parents=True)
    subprocess.run(["bash", "-c", printf], check=True, env={**os.environ, "IPYTHONDIR": str(ipy)})
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("assert callable(init_distributed)")])
    nbformat.write(nb, tmp_path / "probe.ipynb")
    env_before = os.environ.get("IPYTHONDIR")
    os.environ["IPYTHONDIR"] = str(ipy)
    try:
        papermill.execute_notebook(str(tmp_path / "probe.ipynb"), str(tmp_path / "out.ipynb"), kernel_name="python3",
                                   progress_bar=False)
    finally:
        if env_before is None: os.environ.pop("IPYTHONDIR")
        else: os.environ["IPYTHONDIR"] = env_before


def test_dry_run_prints_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "slurm"
    text = submit(str(SCALING), ["run_full=True", "paper_results_path={task_dir}/r.json"], sweep=["paper_scales=2,3,4"],
                  results_param="paper_results_path", dry_run=True, out_dir=str(out))
    printed = capsys.readouterr().out
    assert text in printed and "# ---- job.sbatch" in printed and "# ---- collect.sbatch" in printed
    assert "#SBATCH --array=0-2" in text and not out.exists()


def _fake_sbatch(bin_dir: Path, log: Path):
    bin_dir.mkdir()
    exe = bin_dir / "sbatch"
    exe.write_text(f'#!/bin/bash\necho "$@" >> {log}\necho "4242;cluster"\n')
    exe.chmod(0o755)


def test_submit_sweep_then_collection(tmp_path, monkeypatch):
    log = tmp_path / "calls.txt"
    _fake_sbatch(tmp_path / "bin", log)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    job = submit(str(SCALING), ["run_full=True", "paper_results_path={task_dir}/r.json"],
                 sweep=["paper_variants=mlp,sgatlin", "paper_scales=2,3"], results_param="paper_results_path",
                 out_dir=str(tmp_path / "slurm"), log=None)
    assert job == "4242"
    (run_dir,) = (tmp_path / "slurm").iterdir()
    assert sorted(p.name for p in run_dir.iterdir()) == ["0", "1", "2", "3", "collect.sbatch", "job.sbatch"]
    calls = log.read_text().splitlines()
    assert calls == [f"--parsable {run_dir}/job.sbatch", f"--parsable --dependency=afterany:4242 {run_dir}/collect.sbatch"]
    assert "#SBATCH --array=0-3" in (run_dir / "job.sbatch").read_text()
    assert f'"{run_dir}/3/r.json"' in (run_dir / "collect.sbatch").read_text()


def test_submit_without_sbatch_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RunError, match="sbatch is not on PATH.*--dry-run"):
        submit(str(SCALING), ["run_full=True"], out_dir=str(tmp_path / "slurm"), log=None)
    with pytest.raises(ValueError, match="has no parameter runfull"):
        submit(str(SCALING), ["runfull=True"], dry_run=True, log=None)


def _parameter_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]


# A papermill switch is a top-level boolean `run_*` flag or an output path; `run_dir = reference_run()` is not one.
_SWITCH = re.compile(r"^(run_\w+\s*=\s*(True|False)\b|(results_path|figure_dir)\s*=)", re.M)


def test_switch_pattern():
    assert _SWITCH.search("x = 1\nrun_full = False   # comment")
    assert _SWITCH.search("results_path = 'results/a.json'")
    assert not _SWITCH.search("run_dir = reference_run()")
    assert not _SWITCH.search("    run_full = True")


def test_parameters_tags_survive_nbdev_clean(tmp_path):
    "Every notebook that defines papermill switches has exactly one parameters cell, and nbdev-clean keeps its tag."
    checked = 0
    for path in sorted(NBS.glob("*.ipynb")):
        nb = json.loads(path.read_text())
        defines_switch = any(c["cell_type"] == "code" and _SWITCH.search("".join(c["source"]))
                             for c in nb["cells"])
        params = _parameter_cells(nb)
        assert len(params) <= 1, f"{path.name}: papermill only uses the first of {len(params)} parameters cells"
        if not defines_switch:
            continue
        assert params, f"{path.name} defines papermill parameters outside a cell tagged 'parameters'"
        copy = tmp_path / path.name
        shutil.copy(path, copy)
        res = subprocess.run([str(Path(sys.executable).parent / "nbdev-clean"), "--fname", str(copy)], cwd=ROOT,
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert [c["source"] for c in _parameter_cells(json.loads(copy.read_text()))] == [params[0]["source"]], path.name
        checked += 1
    assert checked >= 3


def test_papermill_runs_07_scaling_with_tiny_parameters(tmp_path, data_dir):
    results = tmp_path / "isoflop.json"
    out = tmp_path / "07_scaling.out.ipynb"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    papermill.execute_notebook(
        str(SCALING), str(out), kernel_name="python3", cwd=str(NBS), progress_bar=False,
        parameters=dict(retrain_cpu=True, results_path=str(results), budgets=[1e11], variants=["mlp", "sgatlin"], scales=[1],
                        corpora=["tinystories"], extra_corpus=None, lr_grid=[], work_dir=str(tmp_path / "runs")))
    runs = json.loads(results.read_text())["runs"]
    assert [(r["variant"], r["scale"], r["budget"]) for r in runs] == [("mlp", 1, 1e11), ("sgatlin", 1, 1e11)]
    assert all(r["error"] is None and r["eval_ppl"] < r["unigram_ppl"] for r in runs)
    executed = json.loads(out.read_text())
    charts = [o for c in executed["cells"] for o in c.get("outputs", []) if "vegaEmbed" in "".join(o.get("data", {}).get("text/html", ""))]
    assert len(charts) >= 2
