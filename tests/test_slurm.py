"""Slurm submission and papermill: the generated sbatch text, submission with a stand-in sbatch, parameters tags, a papermill
run of 07_scaling, and, on a real one-node Slurm (the `slurm` fixture), failed and skipped tasks and a requeued training job."""
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import papermill
import pytest
import yaml

from sgatlin_nb.slurm import SUBMISSION, sbatch_script, submit, sweep_tasks, wait_run
from sgatlin_nb.runs import RunError

from conftest import run_sgatlin, sgatlin_cmd, slurm_delays
from test_multiprocess import _close, _metrics

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / "nbs"
SCALING = NBS / "07_scaling.ipynb"


def _tasks(run_dir):
    return sweep_tasks(SCALING, {"retrain_cpu": True, "results_path": "{task_dir}/r.json"},
                       {"scales": [2, 5], "budgets": [1e17]}, run_dir)


def test_sbatch_text(tmp_path):
    tasks = _tasks(tmp_path)
    text = sbatch_script(SCALING, tasks, run_dir=tmp_path, job_name="iso", nodes=2, gpus_per_node=4,
                         time="02:00:00", account="lab", setup="module load cuda")
    for line in ["#SBATCH --job-name=iso", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=4",
                 "#SBATCH --time=02:00:00", "#SBATCH --account=lab", "#SBATCH --array=0-1",
                 f"#SBATCH --output={tmp_path}/%a/slurm-%A_%a.log", "module load cuda", "export XLA_PYTHON_CLIENT_PREALLOCATE=false",
                 "#SBATCH --signal=B:USR1@300", "#SBATCH --requeue", "#SBATCH --open-mode=append"]:
        assert line in text.splitlines(), line
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    srun = [l for l in text.splitlines() if l.startswith("srun ")]
    assert len(srun) == 1
    args = shlex.split(srun[0])
    inner = args[args.index("-c") + 1]
    assert inner.startswith('papermill "$2" ') and '--kernel "$SGATLIN_KERNEL"' in inner and f"--cwd {NBS}" in inner  # $2: the task's notebook
    assert '"$0/executed-$SLURM_PROCID.ipynb"' in inner and '> "$0/papermill-$SLURM_PROCID.log"' in inner
    assert ' -y "$1"' in inner and "--yaml" not in inner  # papermill 2.7 spells it -y / --parameters_yaml
    assert args[-4:] == ["$TASK_DIR", "$PARAMS", "$NB", "&"]  # in the background, so the USR1 trap fires while the script waits
    assert re.findall(r" NB=(\S+) ;;", text) == [str(SCALING)] * 2  # without lean tasks every task runs the page itself
    params = [yaml.safe_load(shlex.split(m)[0]) for m in re.findall(r"PARAMS=(.*) NB=", text)]
    assert params == tasks
    assert params[1] == {"retrain_cpu": True, "results_path": f"{tmp_path}/1/r.json", "scales": [5], "budgets": [1e17]}
    assert isinstance(params[0]["budgets"][0], float)
    # with a lean copy (`--lean-tasks`), the first task runs the page itself and the others the copy; with
    # `--lean-tasks all` (lean_first) every task runs the copy
    lean = tmp_path / "lean.ipynb"
    for lean_first, first in ((False, SCALING), (True, lean)):
        text = sbatch_script(SCALING, tasks, run_dir=tmp_path, job_name="iso", lean=lean, lean_first=lean_first)
        assert re.findall(r" NB=(\S+) ;;", text) == [str(first), str(lean)], (lean_first, text)


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
    assert sorted(p.name for p in run_dir.iterdir()) == ["0", "1", "2", "3", "collect.sbatch", "job.sbatch", SUBMISSION]
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


def test_papermill_runs_07_scaling_with_tiny_parameters(tmp_path, data_dir, monkeypatch):
    results = tmp_path / "isoflop.json"
    out = tmp_path / "07_scaling.out.ipynb"
    monkeypatch.setenv("JAX_PLATFORMS", os.environ.get("JAX_PLATFORMS", "cpu"))
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


# ---- on a real one-node Slurm (scripts/slurm.sh) ----

def _notebook(path: Path) -> Path:
    "A notebook with one parameter, `fail`, and one cell that fails when it is set."
    cells = [nbformat.v4.new_code_cell("fail = False"), nbformat.v4.new_code_cell("assert not fail, 'failing on purpose'")]
    cells[0].metadata["tags"] = ["parameters"]
    kernel = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata=kernel), path)
    return path


def _job_field(job: str, field: str) -> list[str]:
    out = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True).stdout
    return re.findall(rf"(?:^|\s){field}=(\S+)", out)


def test_submit_wait_reports_a_failed_task_and_a_second_submit_skips_the_done_one(tmp_path, slurm, data_dir):
    run_dir = tmp_path / "run"
    line = ["submit", str(_notebook(tmp_path / "probe.ipynb")), "--sweep", "fail=False,True", "--gpus-per-node", "0",
            "--cpus-per-task", "1", "--time", "00:10:00", "--run-dir", str(run_dir), "--wait"]
    first = run_sgatlin(line, data_dir, timeout=600)
    assert first.returncode == 2, (first.stdout[-2000:], first.stderr[-2000:])
    out = first.stdout.splitlines()
    job = out[0].split()[2].rstrip(":")
    assert out[0].startswith(f"submitted job {job}: 2 of 2 task(s)"), out
    assert out[1:3] == [f"task 0: COMPLETED, exit code 0:0 (job {job}_0)", f"task 1: FAILED, exit code 1:0 (job {job}_1)"], out
    assert out[3] == f"---- task 1: last lines of {run_dir}/1/papermill-0.log", out
    assert "AssertionError: failing on purpose" in first.stdout and "Traceback" not in first.stderr
    assert "1 of 2 task(s)" in first.stderr and first.stderr.strip().endswith("(states FAILED)"), first.stderr
    assert (run_dir / "0" / "done").exists() and not (run_dir / "1" / "done").exists()

    # the same report at any time
    status = run_sgatlin(["status", str(run_dir)], None)
    assert status.returncode == 2 and status.stdout.splitlines()[:2] == out[1:3], status.stdout

    # the same line again: only the failed task runs (and fails again)
    second = run_sgatlin(line, data_dir, timeout=600)
    assert second.returncode == 2, second.stderr[-2000:]
    job2 = second.stdout.split()[2].rstrip(":")
    assert second.stdout.startswith(f"submitted job {job2}: 1 of 2 task(s)"), second.stdout
    assert _job_field(job2, "ArrayTaskId") == ["1"]
    assert json.loads((run_dir / SUBMISSION).read_text())["jobs"][-1] == {"job": job2, "tasks": [1], "array": True}
    assert [p.name for p in (run_dir / "0").glob("slurm-*.log")] == [f"slurm-{job}_0.log"]
    assert f"task 0: COMPLETED, exit code 0:0 (job {job}_0)" in second.stdout
    assert f"task 1: FAILED, exit code 1:0 (job {job2}_1)" in second.stdout


STEPS = 60


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, data_dir):
    "The losses both requeue tests compare with: one process training the same STEPS steps, trained once."
    out = tmp_path_factory.mktemp("one") / "run"
    ref = run_sgatlin(["train", "--config", "test-tiny", "--steps", str(STEPS), "--quiet", "--out", str(out)], data_dir)
    assert ref.returncode == 0, ref.stderr[-2000:]
    return out


def test_requeued_training_job_resumes_with_the_losses_of_one_process(tmp_path, slurm, data_dir, one_process):
    "Two Slurm tasks train; `scontrol requeue` stops them (a checkpoint on SIGTERM) and Slurm runs the job again, which resumes."
    train = ["train", "--config", "test-tiny", "--steps", str(STEPS), "--quiet"]
    out = tmp_path / "two"
    script = tmp_path / "train.sbatch"
    script.write_text("\n".join([
        "#!/bin/bash", "#SBATCH --job-name=requeue-test", "#SBATCH --ntasks=2", "#SBATCH --cpus-per-task=1",
        "#SBATCH --time=00:20:00", "#SBATCH --requeue", "#SBATCH --open-mode=append", f"#SBATCH --output={tmp_path}/slurm-%j.log",
        f"export JAX_PLATFORMS=cpu SGATLIN_DATA_DIR={shlex.quote(str(data_dir))} SGATLIN_DIST_TIMEOUT=30",
        "trap 'echo batch script: SIGTERM' TERM",
        f"srun --kill-on-bad-exit=1 {shlex.join(sgatlin_cmd() + train + ['--out', str(out), '--resume'])} &",
        'while kill -0 $! 2>/dev/null; do wait $! || true; done', "wait $!", ""]))
    t0 = time.time()
    res = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip().split(";")[0]
    log = tmp_path / f"slurm-{job}.log"
    try:  # a failed assertion leaves no job behind
        while (not (out / "metrics.jsonl").exists() or max(_metrics(out)[1], default=0) < 15) and time.time() - t0 < 300:
            assert _job_field(job, "JobState") in (["PENDING"], ["RUNNING"]), log.read_text() if log.exists() else job
            time.sleep(0.2)
        at = max(_metrics(out)[1])
        assert 15 <= at < STEPS, at
        delays = slurm_delays()  # the wait before the job runs again is the cluster's, not ours: read it
        bound = delays["requeue_s"] + 2 * delays["sched_s"] + 370  # then the start-up and the rest of training
        subprocess.run(["scontrol", "requeue", job], check=True)
        t_requeue = time.time()
        while (state := _job_field(job, "JobState")) != ["COMPLETED"] and time.time() - t_requeue < bound:
            # one reading per pass: a second one could already say COMPLETED
            assert state[0] in ("RUNNING", "COMPLETING", "PENDING", "REQUEUED"), log.read_text()
            time.sleep(1)
    finally:
        subprocess.run(["scancel", job])  # a no-op once the job is done
    text = log.read_text()
    assert _job_field(job, "JobState") == ["COMPLETED"] and _job_field(job, "Restarts") == ["1"], text[-3000:]
    stopped = re.findall(r"^sgatlin train: stopped by SIGTERM at step (\d+)", text, re.M)
    assert len(stopped) == 2 and len(set(stopped)) == 1, text[-3000:]  # both tasks, at the same step
    assert "sgatlin train: error:" not in text, text[-3000:]
    end = text.index("\nsample:")
    summary = json.loads(text[text.rindex("\n{\n", 0, end) + 1: end])  # the summary of the run that finished
    assert summary["processes"] == 2 and summary["start_step"] == int(stopped[0]) >= at and summary["step"] == STEPS, summary
    print(f"requeued at step {at}, stopped at {stopped[0]}, {time.time() - t_requeue:.0f} s from requeue to the end")

    # the losses of one process running the same command, every step logged once
    recs, loss, evals = _metrics(out)
    assert sorted(loss) == list(range(1, STEPS + 1)) and len(recs) == len(loss) + len(evals), recs
    print(f"requeued two-task run vs one process: max |loss difference| {_close(loss, _metrics(one_process)[1]):.2e}")


def test_a_task_near_its_time_limit_requeues_itself_and_completes(tmp_path, slurm, data_dir):
    """The package's batch script: Slurm's USR1 before the limit requeues the task, which runs again in its folder.
    Slurm warns 60 s before the 2-minute limit, checking about every 30 s, so between 60 s and 90 s into a run. The
    first run's environment setup takes 100 s (a module load or conda activation can be that slow on a cluster), so the
    warning always arrives while the script still sets up, and it must requeue then too (a script whose traps came after
    the setup took USR1's default action there: FAILED). The second run, the restart, sets up at once and has 60 s
    before its own warning to finish, room for a loaded machine (a 10-s margin requeued it again in one CI run)."""
    cells = [nbformat.v4.new_code_cell("first_run_s = 120"),
             nbformat.v4.new_code_cell("import os, time\nif os.environ.get('SLURM_RESTART_COUNT', '0') == '0': time.sleep(first_run_s)")]
    cells[0].metadata["tags"] = ["parameters"]
    kernel = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata=kernel), tmp_path / "slow.ipynb")
    run_dir = tmp_path / "run"
    lines = []
    t0 = time.time()
    activate = Path(sys.prefix) / "bin" / "activate"
    # the first run's slow setup: `wait` returns when the trap has run, so the requeue comes with the warning
    setup = f'[ "${{SLURM_RESTART_COUNT:-0}}" != 0 ] || {{ sleep 100 & wait $! || true; }}; source {shlex.quote(str(activate))}'
    job = submit(str(tmp_path / "slow.ipynb"), gpus_per_node=0, cpus_per_task=1, time="00:02:00", signal_s=60,
                 run_dir=str(run_dir), setup=setup, log=lines.append)
    delays = slurm_delays()  # the first run up to its warning, the cluster's requeue delay and scheduler passes, a second short run
    rows = wait_run(run_dir, poll_s=1, timeout_s=120 + delays["requeue_s"] + 2 * delays["sched_s"] + 150, log=lines.append)
    log = (run_dir / "0" / f"slurm-{job}.log").read_text()
    assert [r["state"] for r in rows] == ["COMPLETED"] and (run_dir / "0" / "done").exists(), (lines, log)
    assert f"time limit near: requeueing job {job}" in log and "DUE TO JOB REQUEUE" in log, log
    assert _job_field(job, "Restarts") == ["1"]
    print(f"requeued by its time-limit warning and completed in {time.time() - t0:.0f} s")


def _kernel_of(job: str, procid: int) -> int | None:
    "The pid of the notebook kernel that task `procid` of Slurm job `job` runs (read from each process's environment)."
    for d in Path("/proc").iterdir():
        if not d.name.isdigit(): continue
        try:
            env = dict(kv.split("=", 1) for kv in (d / "environ").read_bytes().decode(errors="replace").split("\0") if "=" in kv)
            cmd = (d / "cmdline").read_bytes().decode(errors="replace")
        except OSError: continue
        if env.get("SLURM_JOB_ID") == job and env.get("SLURM_PROCID") == str(procid) and "ipykernel" in cmd:
            return int(d.name)
    return None


def test_a_stalled_process_ends_the_job_which_requeues_and_resumes(tmp_path, slurm, data_dir, monkeypatch, one_process):
    """Two tasks train through the package's batch script; one is stopped with SIGSTOP (alive, making no progress). The
    other's watchdog ends its process within the watchdog's limit, srun ends the job's step, the script requeues the
    job, and the second run resumes from the last checkpoint to the losses of one process running the same command."""
    watchdog_s = 20
    out = tmp_path / "two"
    cells = [nbformat.v4.new_code_cell(f"steps = {STEPS}"),
             nbformat.v4.new_code_cell("import dataclasses\nfrom sgatlin_nb.configs import PRESETS\nfrom sgatlin_nb.train import train\n"
                                       f"summary = train(dataclasses.replace(PRESETS['test-tiny'], steps=steps), 'tinystories', {str(out)!r}, "
                                       "resume=True, progress=False)")]
    cells[0].metadata["tags"] = ["parameters"]
    kernel = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata=kernel), tmp_path / "train.ipynb")
    run_dir = tmp_path / "run"
    for k, v in {"SGATLIN_WATCHDOG_S": watchdog_s, "SGATLIN_DIST_TIMEOUT": 600, "JAX_PLATFORMS": "cpu", "SGATLIN_DATA_DIR": data_dir}.items():
        monkeypatch.setenv(k, str(v))  # the job's environment is this one (sbatch exports it)
    job = submit(str(tmp_path / "train.ipynb"), tasks_per_node=2, gpus_per_node=0, cpus_per_task=1, time="00:20:00",
                 run_dir=str(run_dir), log=lambda line: None)
    try:  # a failed assertion leaves no job behind
        t0 = time.time()
        while not (out / "metrics.jsonl").exists() or max(_metrics(out)[1], default=0) < 15:
            assert time.time() - t0 < 300 and _job_field(job, "JobState")[0] in ("PENDING", "RUNNING"), _job_field(job, "JobState")
            time.sleep(0.2)
        pid = _kernel_of(job, 1)
        assert pid is not None, "no kernel of task 1 found"
        os.kill(pid, signal.SIGSTOP)  # alive, holding its place in every collective
        t_stop, at = time.time(), max(_metrics(out)[1])
        while not list((run_dir / "0").glob(f"stalled-{job}-*.json")) and time.time() - t_stop < 4 * watchdog_s + 60:
            time.sleep(0.5)
        ended = time.time() - t_stop
        delays = slurm_delays()
        rows = wait_run(run_dir, poll_s=1, timeout_s=delays["requeue_s"] + 2 * delays["sched_s"] + 300, log=lambda line: None)
    finally:
        subprocess.run(["scancel", job])
    log = (run_dir / "0" / f"slurm-{job}.log").read_text()
    reports = list((run_dir / "0").glob(f"stalled-{job}-*.json"))
    assert len(reports) == 1, log[-3000:]
    report = json.loads(reports[0].read_text())
    assert ended <= 2 * watchdog_s + 10, (ended, report)  # the watchdog's limit, its polling, and srun ending the step
    assert report["process"] == 0 and report["processes"] == 2 and report["limit_s"] == watchdog_s and report["step"] >= at, report
    assert f"a process stopped making progress: requeueing job {job}" in log, log[-3000:]
    assert [r["state"] for r in rows] == ["COMPLETED"] and _job_field(job, "Restarts") == ["1"], (rows, log[-3000:])
    print(f"stopped task 1 at step {at}; the job's step ended {ended:.0f} s later (watchdog {watchdog_s} s), requeued, completed")
    recs, loss, evals = _metrics(out)
    assert sorted(loss) == list(range(1, STEPS + 1)) and len(recs) == len(loss) + len(evals), recs
    print(f"stalled, requeued two-task run vs one process: max |loss difference| {_close(loss, _metrics(one_process)[1]):.2e}")
