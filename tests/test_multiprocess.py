"""`sgatlin train` as two Slurm tasks on one machine forms one JAX run: the losses of one process with the
same global batch, one writer, a clean failure when a task is killed, and resumption across task counts."""
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sgatlin_nb.train as T
from conftest import run_sgatlin, sgatlin_cmd

STEPS = 20         # test-tiny: checkpoints and held-out evaluations at steps 10 and 20
TIMEOUT_S = 15     # SGATLIN_DIST_TIMEOUT: start-up, heartbeat and shutdown limits of the distributed runtime


def _free_job_id() -> int:
    "A Slurm job id whose coordinator port (61440 + id mod 4096, the package's default) is free right now."
    for port in range(61440 + os.getpid() % 4000, 65536):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try: s.bind(("0.0.0.0", port))
            except OSError: continue
        return port - 61440
    pytest.fail("no free port in 61440-65535 for the coordinator")


def _start_tasks(args, data_dir, n=2) -> list[subprocess.Popen]:
    "Start `sgatlin ARGS` as the n tasks of one Slurm job step on this machine, with Slurm's own variables."
    job = _free_job_id()
    procs = []
    for i in range(n):
        env = {**os.environ, "SGATLIN_DATA_DIR": str(data_dir), "JAX_PLATFORMS": "cpu", "SGATLIN_DIST_TIMEOUT": str(TIMEOUT_S),
               "SLURM_JOB_ID": str(job), "SLURM_NTASKS": str(n), "SLURM_STEP_NUM_TASKS": str(n), "SLURM_PROCID": str(i),
               "SLURM_LOCALID": str(i), "SLURM_NODEID": "0", "SLURM_STEP_NODELIST": "localhost", "SLURM_NODELIST": "localhost",
               "SLURM_JOB_NODELIST": "localhost", "SLURM_STEP_TASKS_PER_NODE": str(n), "SLURM_TASKS_PER_NODE": str(n)}
        procs.append(subprocess.Popen(sgatlin_cmd() + list(args), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def _finish(procs, timeout=300):
    outs = []
    for p in procs:
        try: out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs: q.kill()
            pytest.fail("a task of the two-task run hung")
        outs.append((p.returncode, out, err))
    return outs


def _metrics(out: Path):
    recs = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines() if l]
    return recs, {r["step"]: r["loss"] for r in recs if "loss" in r}, {r["step"]: r["eval_loss"] for r in recs if "eval_loss" in r}


def _last_step(out: Path) -> int:
    p = out / "metrics.jsonl"
    if not p.exists(): return 0
    return max((json.loads(l)["step"] for l in p.read_text().splitlines() if l.strip().endswith("}")), default=0)


def _close(got: dict, want: dict, tol=1e-4):
    assert got.keys() <= want.keys() and got, (sorted(got), sorted(want))
    worst = max(abs(got[k] - want[k]) for k in got)
    assert worst <= tol, (worst, got, want)
    return worst


def test_two_slurm_tasks_form_one_run(tmp_path, data_dir, monkeypatch):
    train = ["train", "--config", "test-tiny", "--quiet", "--steps", str(STEPS)]
    # one process: the reference
    ref = run_sgatlin(train + ["--out", str(tmp_path / "ref")], data_dir)
    assert ref.returncode == 0, ref.stderr[-2000:]
    _, ref_loss, ref_eval = _metrics(tmp_path / "ref")

    # two tasks, task 1 killed with SIGKILL after the checkpoint at step 10 (written before step 11 starts): task 0 fails, and soon
    killed = tmp_path / "killed"
    procs = _start_tasks(train + ["--out", str(killed)], data_dir)
    deadline = time.time() + 240
    while _last_step(killed) < 11 and all(p.poll() is None for p in procs) and time.time() < deadline:
        time.sleep(0.05)
    assert all(p.poll() is None for p in procs), _finish(procs)
    procs[1].send_signal(signal.SIGKILL)
    t_kill = time.time()
    (rc0, _, err0), _ = _finish(procs)  # the survivor must exit, not hang: a hang fails the test after 300 s
    assert rc0 != 0, (rc0, err0[-2000:])
    print(f"task 0 exited {time.time() - t_kill:.0f} s after task 1 was killed (status {rc0})")
    recs, two_loss, _ = _metrics(killed)
    assert len(recs) == len({(r["step"], "loss" in r) for r in recs}), "one writer: every record once"
    assert 11 <= max(two_loss) < STEPS
    print(f"two tasks vs one, steps 1-{max(two_loss)}: max |loss difference| {_close(two_loss, ref_loss):.2e}")

    # the two-task checkpoint of step 10 resumed by one process (this one), to step 15
    monkeypatch.setenv("SGATLIN_DATA_DIR", str(data_dir))
    cfg = dataclasses.replace(T.PRESETS["test-tiny"], steps=STEPS)  # what `sgatlin train --steps 20` trains
    summary = T.train(cfg, "tinystories", killed, resume=True, progress=False, stop_at=15)
    assert (summary["processes"], summary["start_step"], summary["step"]) == (1, 10, 15), summary
    _, one_loss, _ = _metrics(killed)
    assert sorted(one_loss) == list(range(1, 16)), sorted(one_loss)
    print(f"one process (resumed), steps 11-15: max |loss difference| "
          f"{_close({s: one_loss[s] for s in range(11, 16)}, ref_loss):.2e}")

    # that one-process checkpoint resumed by two tasks: the reference losses to the end; process 0 alone writes and prints
    (rc0, out0, err0), (rc1, out1, err1) = _finish(_start_tasks(train + ["--out", str(killed), "--resume"], data_dir))
    assert rc0 == rc1 == 0, (err0[-2000:], err1[-2000:])
    summary = _summary(out0)
    assert summary["processes"] == 2 and summary["start_step"] == 15 and summary["step"] == STEPS, summary
    assert "sample:" not in out1 and "start_step" not in out1, out1
    recs, loss, evals = _metrics(killed)
    assert sorted(loss) == list(range(1, STEPS + 1)) and len(recs) == len(loss) + len(evals)
    print(f"two tasks (resumed), all steps: max |loss difference| {_close(loss, ref_loss):.2e}")
    _close(evals, ref_eval)
    assert (killed / "samples.txt").read_text().count("--- step") == 1

    # the two-task checkpoint restores onto one process (another mesh): its held-out loss is the logged one
    check = run_sgatlin(["eval", "--run", str(killed)], None, extra_env={"HF_HUB_OFFLINE": "1"})
    assert check.returncode == 0, check.stderr[-2000:]
    assert abs(json.loads(check.stdout)["eval_loss"] - evals[STEPS]) <= 1e-5, (check.stdout, evals[STEPS])


def _summary(stdout: str) -> dict:
    "The JSON summary `sgatlin train` prints (after any line the collectives library writes)."
    return json.loads(stdout[stdout.index("{"): stdout.index("\nsample:")])
