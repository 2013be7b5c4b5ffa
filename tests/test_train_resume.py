"A run stopped mid-training (SIGKILL, or Slurm's SIGTERM) and resumed continues with exactly the losses of an uninterrupted run."
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import run_sgatlin, sgatlin_cmd

STEPS = 160
COMMON = ["train", "--config", "test-tiny", "--steps", str(STEPS), "--quiet"]  # test-tiny: a checkpoint every 10 steps


def _records(out: Path) -> list[dict]:
    "Every complete line of metrics.jsonl (a line still being written is skipped)."
    p = out / "metrics.jsonl"
    return [json.loads(l) for l in p.read_text().splitlines() if l.strip().endswith("}")] if p.exists() else []


def _losses(out: Path):
    recs = _records(out)
    return {r["step"]: r["loss"] for r in recs if "loss" in r}, {r["step"]: r["eval_loss"] for r in recs if "eval_loss" in r}


def _last_step(out: Path) -> int:
    return max((r["step"] for r in _records(out)), default=0)


def _saved(out: Path) -> list[int]:
    d = out / "checkpoints"
    return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit()) if d.is_dir() else []


def _start(out: Path, data_dir: Path) -> subprocess.Popen:
    env = {**os.environ, "SGATLIN_DATA_DIR": str(data_dir), "JAX_PLATFORMS": "cpu"}
    return subprocess.Popen(sgatlin_cmd() + COMMON + ["--out", str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _resume_and_compare(out: Path, ref: Path, data_dir: Path) -> dict:
    "Resume the run in `out` to the end; each training step logged once, losses equal to the reference run's. Its summary."
    res = run_sgatlin(COMMON + ["--out", str(out), "--resume"], data_dir)
    assert res.returncode == 0, res.stderr[-2000:]
    train_steps = [r["step"] for r in _records(out) if "loss" in r]
    assert sorted(train_steps) == list(range(1, STEPS + 1))  # a list: a step logged twice fails here
    assert sorted(r["step"] for r in _records(out) if "eval_loss" in r) == list(range(10, STEPS + 1, 10))
    assert _losses(out) == _losses(ref)  # exactly: same data, same arithmetic
    return json.loads(res.stdout[: res.stdout.index("\nsample:")])


@pytest.fixture(scope="module")
def reference(tmp_path_factory, data_dir) -> Path:
    "One uninterrupted run, shared by the tests of this module."
    out = tmp_path_factory.mktemp("reference") / "run"
    ref = run_sgatlin(COMMON + ["--out", str(out)], data_dir)
    assert ref.returncode == 0, ref.stderr[-2000:]
    return out


def test_sigkill_then_resume_matches_uninterrupted_run(tmp_path, data_dir, reference):
    out = tmp_path / "killed"
    proc = _start(out, data_dir)
    deadline = time.time() + 600
    while _last_step(out) < 35 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, f"the run ended before it could be killed: {proc.stderr.read()[-2000:]}"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = _last_step(out)
    assert killed_at < STEPS, killed_at
    saved = _saved(out)
    assert saved and max(saved) <= killed_at, (saved, killed_at)

    summary = _resume_and_compare(out, reference, data_dir)
    assert summary["start_step"] == max(saved) > 0


def test_sigterm_saves_the_step_reached_then_resume_matches(tmp_path, data_dir, reference):
    out = tmp_path / "preempted"
    proc = _start(out, data_dir)
    deadline = time.time() + 600
    while proc.poll() is None and time.time() < deadline:
        # Freeze the run to read where it is: it stops after the logged step or the one in progress. Signal it only
        # when neither is a checkpoint step, so the checkpoint that must exist can only come from the signal.
        os.kill(proc.pid, signal.SIGSTOP)
        last = _last_step(out)
        if last > 35 and last % 10 not in (0, 9):
            os.kill(proc.pid, signal.SIGTERM)
            os.kill(proc.pid, signal.SIGCONT)
            break
        os.kill(proc.pid, signal.SIGCONT)
        time.sleep(0.01)
    else:
        pytest.fail(f"the run ended (or hung) before it could be signalled: {proc.stderr.read()[-2000:]}")
    stderr = proc.communicate(timeout=300)[1]
    assert proc.returncode > 0, (proc.returncode, stderr[-2000:])  # it exited by itself, not killed by the signal

    stopped_at = _last_step(out)
    assert last <= stopped_at <= last + 1 and stopped_at % 10 != 0, (last, stopped_at)
    last_line = stderr.strip().splitlines()[-1]
    assert f"SIGTERM at step {stopped_at}:" in last_line and "--resume" in last_line, last_line
    assert _saved(out)[-1] == stopped_at, (_saved(out), stopped_at)
    assert (out / "checksums" / f"{stopped_at}.json").exists()

    summary = _resume_and_compare(out, reference, data_dir)
    assert summary["start_step"] == stopped_at
