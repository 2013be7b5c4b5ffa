"A run killed with SIGKILL mid-training and resumed continues with exactly the losses of an uninterrupted run."
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from conftest import run_sgatlin, sgatlin_cmd

STEPS = "160"


def _losses(out: Path) -> dict[int, float]:
    recs = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines() if l]
    return {r["step"]: r["loss"] for r in recs if "loss" in r}, {r["step"]: r["eval_loss"] for r in recs if "eval_loss" in r}


def _last_step(out: Path) -> int:
    p = out / "metrics.jsonl"
    if not p.exists():
        return 0
    steps = [json.loads(l)["step"] for l in p.read_text().splitlines() if l.strip().endswith("}")]
    return max(steps, default=0)


def test_sigkill_then_resume_matches_uninterrupted_run(tmp_path, data_dir):
    common = ["train", "--config", "test-tiny", "--steps", STEPS, "--quiet"]
    ref = run_sgatlin(common + ["--out", str(tmp_path / "ref")], data_dir)
    assert ref.returncode == 0, ref.stderr[-2000:]

    out = tmp_path / "killed"
    env = {**os.environ, "SGATLIN_DATA_DIR": str(data_dir), "JAX_PLATFORMS": "cpu"}
    proc = subprocess.Popen(sgatlin_cmd() + common + ["--out", str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 600
    while _last_step(out) < 35 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, f"the run ended before it could be killed: {proc.stderr.read()[-2000:]}"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = _last_step(out)
    assert killed_at < int(STEPS), killed_at
    saved = sorted(int(p.name) for p in (out / "checkpoints").iterdir() if p.name.isdigit())
    assert saved and max(saved) <= killed_at, (saved, killed_at)

    res = run_sgatlin(common + ["--out", str(out), "--resume"], data_dir)
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout[: res.stdout.index("\nsample:")])
    assert summary["start_step"] == max(saved) > 0

    (ref_loss, ref_eval), (got_loss, got_eval) = _losses(tmp_path / "ref"), _losses(out)
    assert sorted(got_loss) == list(range(1, int(STEPS) + 1))
    assert got_loss == ref_loss  # exactly: same data, same arithmetic
    assert got_eval == ref_eval
