"A run stopped mid-training (SIGKILL, Slurm's SIGTERM, or `stop_at`) and resumed continues with exactly the losses of an uninterrupted run."
import dataclasses
import json
import re
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_sgatlin, sgatlin_cmd

import sgatlin_nb.train as T
from sgatlin_nb.data import TokenFile, read_texts, resolve_steps

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


def _start(out: Path, data_dir: Path, *extra: str, extra_env=None) -> subprocess.Popen:
    env = {**os.environ, "SGATLIN_DATA_DIR": str(data_dir), "JAX_PLATFORMS": "cpu", **(extra_env or {})}
    return subprocess.Popen(sgatlin_cmd() + COMMON + ["--out", str(out), *extra], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _lrs(out: Path) -> dict:
    return {r["step"]: r["lr"] for r in _records(out) if "lr" in r}


def _matches_reference(out: Path, ref: Path, steps: int = STEPS):
    "Each training step of `out` logged once, each evaluation once, losses and learning rates equal to the reference run's."
    train_steps = [r["step"] for r in _records(out) if "loss" in r]
    assert sorted(train_steps) == list(range(1, steps + 1))  # a list: a step logged twice fails here
    assert sorted(r["step"] for r in _records(out) if "eval_loss" in r) == list(range(10, steps + 1, 10))
    assert _losses(out) == _losses(ref)  # exactly: same data, same arithmetic
    assert _lrs(out) == _lrs(ref)  # the full run's schedule


def _resume_and_compare(out: Path, ref: Path, data_dir: Path) -> dict:
    "Resume the run in `out` to the end; each training step logged once, losses equal to the reference run's. Its summary."
    res = run_sgatlin(COMMON + ["--out", str(out), "--resume"], data_dir)
    assert res.returncode == 0, res.stderr[-2000:]
    _matches_reference(out, ref)
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
        # Freeze the run to read where it is. The loop logs a step once the next one is dispatched, so it stops after
        # the logged step or one of the two after it. Signal it only when none is a checkpoint step, so the checkpoint
        # that must exist can only come from the signal.
        os.kill(proc.pid, signal.SIGSTOP)
        last = _last_step(out)
        if last > 35 and last % 10 not in (0, 8, 9):
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
    assert last <= stopped_at <= last + 2 and stopped_at % 10 != 0, (last, stopped_at)
    last_line = stderr.strip().splitlines()[-1]
    assert f"SIGTERM at step {stopped_at}:" in last_line and "--resume" in last_line, last_line
    assert _saved(out)[-1] == stopped_at, (_saved(out), stopped_at)
    assert (out / "checksums" / f"{stopped_at}.json").exists()

    summary = _resume_and_compare(out, reference, data_dir)
    assert summary["start_step"] == stopped_at


def test_stop_at_then_resume_matches_uninterrupted_run(tmp_path, data_dir, reference, monkeypatch):
    monkeypatch.setenv("SGATLIN_DATA_DIR", str(data_dir))
    cfg = dataclasses.replace(T.PRESETS["test-tiny"], steps=STEPS)  # what `sgatlin train --steps 160` trains
    out = tmp_path / "stopped"
    shutil.copytree(reference, out)
    # the reference as if killed after its checkpoint at step 140, so that the stop falls in the decay (from step 128)
    for step in (150, 160):
        shutil.rmtree(out / "checkpoints" / str(step))
        (out / "checksums" / f"{step}.json").unlink()
    summary = T.train(cfg, "tinystories", out, resume=True, progress=False, stop_at=147)
    assert (summary["start_step"], summary["step"]) == (140, 147), summary
    assert _last_step(out) == 147 and _saved(out)[-1] == 147, (_last_step(out), _saved(out))  # stopped and saved there

    summary = T.train(cfg, "tinystories", out, resume=True, progress=False)
    assert (summary["start_step"], summary["step"]) == (147, STEPS), summary
    _matches_reference(out, reference)


# the paper preset's data recipe (`tinystories`: one story per row, whole epochs) on test-tiny; with epochs set, steps
# (10 here, one of the checkpoints) gives way to what the epochs make: 20, the compiled programs of `--steps 20` runs
EPOCHS = dataclasses.replace(T.PRESETS["test-tiny"], batching="document", epochs=2, steps=10)
N_STORIES, EPOCH_STEPS = 84, 10  # 82 of the 84 stories train (2 are held out): 10 batches of 8 an epoch


@pytest.fixture(scope="module")
def epochs_run(tmp_path_factory, data_dir):
    "84 stories as a corpus, and an uninterrupted two-epoch run on it."
    folder = tmp_path_factory.mktemp("epochs")
    data = folder / "stories.txt"
    data.write_text("".join(t + "\n<|endoftext|>\n" for t in read_texts("tinystories-train", data_dir=data_dir, max_docs=N_STORIES)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SGATLIN_DATA_DIR", str(data_dir))  # the sgatlin tokenizer
        summary = T.train(EPOCHS, str(data), folder / "run", progress=False)
    assert resolve_steps(EPOCHS, TokenFile(folder / "run" / "data" / "train.bin")).steps == 2 * EPOCH_STEPS
    assert summary["step"] == 2 * EPOCH_STEPS and _saved(folder / "run") == [10, 2 * EPOCH_STEPS], summary
    return str(data), folder / "run"


def test_document_epochs_run_stopped_then_resumed_matches(tmp_path, data_dir, epochs_run, monkeypatch):
    monkeypatch.setenv("SGATLIN_DATA_DIR", str(data_dir))
    data, ref = epochs_run
    out = tmp_path / "run"
    summary = T.train(EPOCHS, data, out, progress=False, stop_at=5)  # resumed, it goes on into the second epoch
    assert summary["step"] == 5 and _saved(out) == [5], (summary, _saved(out))
    summary = T.train(EPOCHS, data, out, resume=True, progress=False)
    assert (summary["start_step"], summary["step"]) == (5, 2 * EPOCH_STEPS), summary
    _matches_reference(out, ref, steps=2 * EPOCH_STEPS)


def test_cached_run_knows_when_an_epochs_run_is_finished(tmp_path, epochs_run, monkeypatch):
    data, ref = epochs_run
    monkeypatch.setitem(T.PRESETS, "test-epochs", EPOCHS)
    trained = []
    monkeypatch.setattr(T, "train", lambda cfg, data, out, **kw: trained.append((out, kw)))
    out = tmp_path / f"test-epochs--{data.replace('/', '_')}"  # where cached_run keeps it
    shutil.copytree(ref, out)
    assert T.cached_run("test-epochs", data, root=tmp_path, progress=False) == out
    assert trained == []  # finished at step 20: not trained again

    # without its last checkpoint the run is unfinished, though its newest, step 10, is the steps of the config as given
    shutil.rmtree(out / "checkpoints" / str(2 * EPOCH_STEPS))
    assert T.cached_run("test-epochs", data, root=tmp_path, progress=False) == out
    assert [o for o, kw in trained] == [out] and trained[0][1]["resume"], trained  # resumed


def _serve(argv: list[str], log: Path) -> tuple[subprocess.Popen, int]:
    "Start the server `argv` + its port on loopback, wait until it accepts connections: the process and the port."
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(argv + [str(port)], stdout=open(log, "w"), stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0: return proc, port
        assert proc.poll() is None and time.time() < deadline, log.read_text()[-2000:]
        time.sleep(0.2)


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    """A Google Cloud Storage server on loopback (gcp-storage-emulator, in memory, bucket `runs`), and the environment
    under which gcsfs talks to it. gcsfs's probe of bucket types (a gRPC call the emulator does not serve, 60 s per try)
    is switched off; it reads the variable when first imported, so this process is checked through a subprocess."""
    bin_dir = Path(sys.executable).parent
    proc, port = _serve([str(bin_dir / "gcp-storage-emulator"), "start", "--host", "127.0.0.1", "--in-memory",
                         "--default-bucket", "runs", "--port"], tmp_path_factory.mktemp("gcs") / "emulator.log")
    yield {"STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}", "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture
def s3(tmp_path, monkeypatch):
    "An S3 server on loopback (moto's), this process's environment pointing s3fs at it, and a bucket `runs`."
    proc, port = _serve([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p"], tmp_path / "moto.log")
    for k, v in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
                 "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}.items():
        monkeypatch.setenv(k, v)
    import fsspec
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.mkdir("runs")
    yield fs
    proc.terminate()
    proc.wait(timeout=30)


def _mirror_steps(url: str, env: dict) -> list[int]:
    "`mirror_steps(url)` asked in a fresh process with `env`."
    out = subprocess.run([sys.executable, "-c", f"from sgatlin_nb.runs import mirror_steps; print(mirror_steps({url!r}))"],
                         env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_mirrored_run_killed_then_resumed_on_an_empty_node(tmp_path, data_dir, reference, gcs):
    """Train with `--mirror gs://...` on a real GCS server, SIGKILL the run, lose its folder (the node is gone), and
    resume into an empty folder: the mirror's newest checkpoint comes back and the losses equal the uninterrupted run's."""
    url = "gs://runs/killed"
    node1 = tmp_path / "node1" / "run"
    proc = _start(node1, data_dir, "--mirror", url, extra_env=gcs)
    deadline = time.time() + 600
    while proc.poll() is None and time.time() < deadline and not (_last_step(node1) > 35 and len(_saved(node1)) >= 3):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()[-2000:]
    held = _mirror_steps(url, gcs)
    assert held and held[-1] >= 30 and held[-1] % 10 == 0, held  # complete checkpoints only, up to the newest pushed
    shutil.rmtree(node1.parent)

    node2 = tmp_path / "node2" / "run"
    res = run_sgatlin(COMMON + ["--out", str(node2), "--resume", "--mirror", url], data_dir, extra_env=gcs)
    assert res.returncode == 0, res.stderr[-2000:]
    # the newest checkpoint comes back, unless the kill cut its push short: then its checksums refuse it (a file shorter
    # than written) and the one before it comes back (seen once in CI under load: 30 damaged, 20 fetched)
    cut = re.search(rf"checkpoint (\d+) of the mirror {re.escape(url)} is damaged .*; trying the one before it", res.stderr)
    want = held[-1] if cut is None else held[-2]
    assert cut is None or int(cut[1]) == held[-1], res.stderr[-2000:]
    assert f"checkpoint {want} fetched from the mirror {url}" in res.stderr, res.stderr[-2000:]
    assert json.loads(res.stdout[: res.stdout.index("\nsample:")])["start_step"] == want
    _matches_reference(node2, reference)
    assert _mirror_steps(url, gcs) == _saved(node2)  # the mirror keeps what the run keeps, the last step included

    # a new run (no --resume) into a mirror that holds one is refused in one line, before any file is written
    res = run_sgatlin(COMMON + ["--out", str(tmp_path / "new"), "--mirror", url], data_dir, extra_env=gcs)
    assert res.returncode == 2 and "already holds a run" in res.stderr and "--resume" in res.stderr, res.stderr[-2000:]
    assert not (tmp_path / "new").exists()
    # ... and so is a resume with other settings than the mirror's run: nothing is fetched
    res = run_sgatlin(["train", "--config", "test-tiny", "--steps", "170", "--quiet", "--out", str(tmp_path / "other"),
                       "--resume", "--mirror", url], data_dir, extra_env=gcs)
    assert res.returncode == 2 and f"the mirror {url} holds a different run" in res.stderr, res.stderr[-2000:]
    assert not (tmp_path / "other").exists()


def test_mirror_on_s3_holds_a_run_that_resumes(tmp_path, data_dir, reference, s3, monkeypatch):
    """The same mirror on an S3 server (s3fs, moto's server): the reference run's checkpoints up to step 140 go up, a
    step cut short (no checksums) is not taken, step 140 comes down into an empty folder intact, and the run resumed
    from it ends with the reference's losses."""
    from sgatlin_nb.runs import checkpoint_damage, mirror_steps, pull_run, push_run
    url, upto = "s3://runs/reference", [s for s in _saved(reference) if s <= 140]
    for step in upto: push_run(reference, url, step)
    assert mirror_steps(url) == upto
    s3.pipe_file("runs/reference/checkpoints/150/default/part", b"cut short")
    assert mirror_steps(url) == upto
    out = tmp_path / "node2" / "run"
    assert pull_run(url, out) == 140 and checkpoint_damage(out, 140) is None
    monkeypatch.setenv("SGATLIN_DATA_DIR", str(data_dir))
    cfg = dataclasses.replace(T.PRESETS["test-tiny"], steps=STEPS)  # what `sgatlin train --steps 160` trains
    summary = T.train(cfg, "tinystories", out, resume=True, progress=False, mirror=url)
    assert summary["start_step"] == 140, summary
    _matches_reference(out, reference)
    assert mirror_steps(url)[-1] == STEPS
    s3.invalidate_cache()
    assert not s3.exists("runs/reference/checkpoints/150/default/part")  # the cut-short upload was replaced, not mixed in
