"""Bad input ends with one line saying what to do, exit status 2, no traceback, and nothing lost.

Each case checks the line, the status, and that the files already there are unchanged (`snapshot`: SHA-256 of every
file). Every command is refused at least once as a user runs it (a subprocess of the console script: `run_sgatlin`);
the other refusals call `main` in this process with the same environment and the file descriptors captured
(`run_in_process`), which saves an interpreter start and the imports per case. The runs the refusals read (`run20`)
and the runs that must succeed are real subprocesses.
"""
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sgatlin_nb.train as train_mod
from conftest import run_in_process, run_sgatlin, sgatlin_cmd, snapshot
from sgatlin_nb.configs import PRESETS
from sgatlin_nb.train import train
from sgatlin_nb.runs import RunError, checkpoint_steps

TOKENIZER = "sgatlin_tokenizer/tokenizer.json"


def _fails(res, *needles):
    "The command failed as it should: status 2, one line starting `sgatlin COMMAND: error:`, holding each needle."
    assert res.returncode == 2, (res.returncode, res.stdout[-1000:], res.stderr[-2000:])
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("sgatlin ") and ": error: " in lines[0], res.stderr[-2000:]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def _train(out, data_dir, *extra, data="tinystories", run=run_sgatlin):
    return run(["train", "--config", "test-tiny", "--data", str(data), "--out", str(out), "--quiet", *extra], data_dir)


def _refused_train(out, data_dir, *extra, data="tinystories"):
    "`_train` in this process (`run_in_process`): for refusals, once `sgatlin train` has been refused in a subprocess."
    return _train(out, data_dir, *extra, data=data, run=run_in_process)


@pytest.fixture(scope="module")
def run20(tmp_path_factory, data_dir) -> Path:
    "A finished 20-step test-tiny run (checkpoints 10 and 20); tests copy it before they damage anything."
    out = tmp_path_factory.mktemp("good") / "run"
    res = _train(out, data_dir, "--steps", "20")
    assert res.returncode == 0, res.stderr[-2000:]
    assert checkpoint_steps(out) == [10, 20]
    return out


def _copy(run: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "run"
    shutil.copytree(run, dest)
    return dest


# ---- a run directory that is not a run ----

def test_not_a_run(tmp_path, data_dir, run20):
    (tmp_path / "empty").mkdir()
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "manifest.json").write_text('{"format": "sgatlin-circuits"}')
    before = {d: snapshot(tmp_path / d) for d in ("empty", "db")}
    for cmd in ("eval", "sample", "usage", "patch", "record"):
        _fails(run_sgatlin([cmd, "--run", str(tmp_path / "none")], data_dir), "does not exist")
    _fails(run_in_process(["eval", "--run", str(tmp_path / "empty")], data_dir), "holds no sgatlin run")
    _fails(run_in_process(["sample", "--run", str(tmp_path / "db")], data_dir), "is a circuit database, not a training run")
    assert {d: snapshot(tmp_path / d) for d in ("empty", "db")} == before  # the folders refused are left as they were
    # an option a command refuses (RENAMED) names the one to use, and nothing runs
    _fails(run_in_process(["eval", "--out", str(run20)], data_dir), "--out is not an option of sgatlin eval: use --run")
    _fails(run_in_process(["patch", "--results", str(tmp_path / "x")], data_dir), "--results is not an option of sgatlin patch: use --out")
    _fails(run_in_process(["usage", "--report", str(tmp_path / "x")], data_dir), "--report is not an option of sgatlin usage: use --out")
    _fails(run_in_process(["usage", "--out", str(run20)], data_dir), f"name the run with --run {run20}")
    assert not (tmp_path / "x").exists()


def test_analyses_do_not_write_into_a_training_run(data_dir, run20):
    "neighbours, map and graph keep their files out of a run's own folder: one line, the folder untouched."
    before = snapshot(run20)
    for argv in (["neighbours", "The dog ran"], ["map", "--db", str(run20)], ["graph", "The dog"]):
        _fails(run_in_process([*argv, "--out", str(run20)], data_dir), "is a training run's folder: write the analysis")
    _fails(run_in_process(["eval", "--run", str(run20), "--tasks", "copy", "--limit", "0"], data_dir), "--limit must be at least 1")
    _fails(run_in_process(["eval", "--run", str(run20), "--tasks", "copy,hellaswagg"], data_dir), "unknown task 'hellaswagg'")
    _fails(run_in_process(["eval", "--run", str(run20), "--limit", "3"], data_dir), "go with --tasks")
    assert snapshot(run20) == before


# ---- damaged checkpoints ----

def _damage(ckpt: Path, how: str) -> str:
    "Damage the largest file of a checkpoint folder; returns its relative path."
    big = max((p for p in ckpt.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    data = big.read_bytes()
    if how == "flip":
        big.write_bytes(data[:100] + bytes([data[100] ^ 0x10]) + data[101:])
    elif how == "truncate":
        big.write_bytes(data[: len(data) // 2])
    else:
        big.unlink()
    return str(big.relative_to(ckpt))


@pytest.mark.parametrize("how, says", [("flip", "changed since it was written"), ("truncate", "bytes, "),
                                      ("remove", "is missing")])
def test_damaged_checkpoint(tmp_path, data_dir, run20, how, says):
    run = _copy(run20, tmp_path)
    name = _damage(run / "checkpoints" / "20", how)
    before = snapshot(run)
    for cmd in (["eval"], ["sample", "--n-tokens", "5"]):
        _fails(run_in_process([*cmd, "--run", str(run)], data_dir), "checkpoint step 20", "is damaged", name, says,
               "pass --step 10")
    assert snapshot(run) == before, "a refused command changes nothing"
    # asked for, the previous good checkpoint is used
    res = run_sgatlin(["eval", "--run", str(run), "--step", "10"], "")
    assert res.returncode == 0 and json.loads(res.stdout)["step"] == 10, res.stderr[-2000:]
    # resuming goes back to the newest good checkpoint by itself, says so, and keeps the damaged one aside
    res = _train(run, data_dir, "--steps", "20", "--resume")
    assert res.returncode == 0, res.stderr[-2000:]
    assert '"start_step": 10' in res.stdout
    assert "resuming from step 10: checkpoint step 20" in res.stderr and "damaged/step-20" in res.stderr
    assert checkpoint_steps(run) == [10, 20] and (run / "damaged" / "step-20").is_dir()
    assert run_sgatlin(["eval", "--run", str(run)], "").returncode == 0


def test_a_checkpoint_removed_while_it_is_read_is_no_damage(tmp_path, monkeypatch, run20):
    "A training run rotating a checkpoint out under `eval`: the reader's files vanish (errno 2); not damage, no raw error."
    import sgatlin_nb.runs as runs
    run = _copy(run20, tmp_path)
    last = runs.checkpoint_steps(run)[-1]
    def vanishing(folder):
        raise FileNotFoundError(2, 'No such file or directory', str(folder / 'default'))
    monkeypatch.setattr(runs, '_file_sums', vanishing)
    assert runs.checkpoint_damage(run, last) == 'its files were removed while they were read'


def test_partial_checkpoint_is_ignored(tmp_path, data_dir, run20):
    run = _copy(run20, tmp_path)
    partial = run / "checkpoints" / "30.orbax-checkpoint-tmp-1234"
    partial.mkdir()
    (partial / "d").write_bytes(b"half written")
    res = _train(run, data_dir, "--steps", "20", "--resume")
    assert res.returncode == 0, res.stderr[-2000:]
    assert '"start_step": 20' in res.stdout and partial.exists()


# ---- resuming with other settings, another run in the folder ----

def test_resume_with_other_settings_is_refused(tmp_path, data_dir, run20):
    run = _copy(run20, tmp_path)
    before = snapshot(run)
    _fails(_train(run, data_dir, "--steps", "20"), "already holds a run", "--resume")
    _fails(_refused_train(run, data_dir, "--steps", "30", "--resume"), "holds a run of 20 steps, and a run cannot be extended",
           "resume it with --steps 20, or train 30 steps as a new run in another --out")  # issue 66: the refusal says how
    _fails(_refused_train(run, data_dir, "--steps", "30", "lr=0.01", "--resume"), "differs in: lr (was 0.003, now 0.01); steps (was 20, now 30)")
    _fails(_refused_train(run, data_dir, "--steps", "20", "--resume", "--tokenizer", "gpt2"),
           "tokenizer (was 'sgatlin', now 'gpt2')")
    _fails(_refused_train(run, data_dir, "--steps", "20", "--resume", data="tinystories-valid"),
           "data (was 'tinystories', now 'tinystories-valid')")
    assert snapshot(run) == before
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    _fails(_refused_train(tmp_path / "other", data_dir), "not empty")
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"


def test_resume_with_another_model_names_the_field(tmp_path, data_dir, run20, monkeypatch):
    monkeypatch.setenv("SGATLIN_DATA_DIR", str(data_dir))
    cfg = PRESETS["test-tiny"]
    cfg = dataclasses.replace(cfg, steps=20, model=dataclasses.replace(cfg.model, n_layers=2))
    with pytest.raises(RunError, match=r"differs in: model.n_layers \(was 1, now 2\)"):
        train(cfg, "tinystories", _copy(run20, tmp_path), resume=True, progress=False)


# ---- two trainings on one folder ----

def test_second_train_on_the_same_folder_is_refused_and_a_killed_one_leaves_no_stale_lock(tmp_path, data_dir):
    out = tmp_path / "run"
    env = {**os.environ, "SGATLIN_DATA_DIR": str(data_dir), "JAX_PLATFORMS": "cpu"}
    args = ["train", "--config", "test-tiny", "--out", str(out), "--steps", "2000", "--quiet"]
    first = subprocess.Popen(sgatlin_cmd() + args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 300
        while not (out / "metrics.jsonl").exists() and first.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert first.poll() is None, first.stderr.read()[-2000:]
        _fails(run_in_process(args, data_dir), f"is in use by sgatlin train (pid {first.pid}")
        _fails(run_in_process(args + ["--resume"], data_dir), "is in use by sgatlin train")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert (out / ".lock").exists()  # the file stays, but the lock died with its process
    second = subprocess.Popen(sgatlin_cmd() + args + ["--resume"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while f"pid {second.pid} " not in (out / ".lock").read_text() and second.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert f"pid {second.pid} " in (out / ".lock").read_text(), second.stderr.read()[-2000:] if second.poll() else ""
    finally:
        second.send_signal(signal.SIGKILL)
        second.wait()


# ---- corpora and tokenizers ----

@pytest.mark.parametrize("name, content, says", [
    ("empty.txt", b"", "holds no documents"),
    ("blank.txt", b"\n<|endoftext|>\n   \n", "holds no documents"),
    ("bad.txt", b"Once upon a time\n\xff\xfe there was a dog.\n", "is not UTF-8: byte 0xff at byte offset 17"),
    ("tokens.bin", np.arange(1, 5000, dtype=np.uint16).tobytes(), "is binary, not text (a NUL byte at byte offset 1)"),
    ("one_line.txt", b"word " * (2 << 20), "line 1 is longer than 8 MiB"),
])
def test_bad_corpus(tmp_path, data_dir, name, content, says):
    (tmp_path / name).write_bytes(content)
    _fails(_refused_train(tmp_path / "r", data_dir, data=tmp_path / name), name, says)
    assert not (tmp_path / "r").exists(), "a run that never started leaves nothing behind"


def test_missing_corpus(tmp_path, data_dir):
    _fails(_refused_train(tmp_path / "r", data_dir, data=tmp_path / "no_such_file.txt"), "no_such_file.txt")
    assert not (tmp_path / "r").exists(), "a run that never started leaves nothing behind"
    (tmp_path / "r").mkdir()  # a folder made by hand is kept
    _fails(_refused_train(tmp_path / "r", data_dir, data=tmp_path / "no_such_file.txt"), "no_such_file.txt")
    assert (tmp_path / "r").is_dir()


def test_tokenizer_that_is_not_a_tokenizer(tmp_path, data_dir):
    (tmp_path / "tok.json").write_text('{"vocab": [1, 2, 3]}')
    _fails(_refused_train(tmp_path / "r", data_dir, "--tokenizer", str(tmp_path / "tok.json")), "tok.json is not a tokenizer")
    (tmp_path / "tok.bin").write_bytes(b"\x89PNG\r\n\x1a\n\0\0")
    _fails(_refused_train(tmp_path / "r2", data_dir, "--tokenizer", str(tmp_path / "tok.bin")), "is not a tokenizer")


def test_hub_unreachable(tmp_path, data_dir):
    "A hub name without a network (HF_HUB_OFFLINE=1, no data folder): one line naming both ways out."
    res = run_sgatlin(["train", "--config", "test-tiny", "--out", str(tmp_path / "r"), "--quiet",
                       "--tokenizer", str(data_dir / TOKENIZER)], "", extra_env={"HF_HUB_OFFLINE": "1"})
    _fails(res, "Hugging Face hub", "SGATLIN_DATA_DIR", "--data PATH")


# ---- a loss that becomes NaN ----

def test_nan_loss_from_an_absurd_learning_rate(tmp_path, data_dir):
    _fails(_refused_train(tmp_path / "r", data_dir, "--lr", "1e9"), "loss became nan at step", "lower lr")


def test_nan_loss_keeps_the_last_good_checkpoint(tmp_path, data_dir, monkeypatch):
    "The loop itself: a loss forced to NaN at step 15 stops the run there and keeps checkpoint 10."
    monkeypatch.setenv("SGATLIN_DATA_DIR", str(data_dir))
    real = train_mod.make_train_step

    def nan_from_15(*args, **kwargs):
        step = real(*args, **kwargs)
        def wrapped(state, batch):
            new, m = step(state, batch)
            return new, {**m, 'loss': jnp.where(new['step'] >= 15, jnp.nan, m['loss'])}
        return jax.jit(wrapped)  # train compiles the step ahead of time, from shapes

    monkeypatch.setattr(train_mod, "make_train_step", nan_from_15)
    with pytest.raises(RunError, match="loss became nan at step 15.*last good checkpoint is step 10"):
        train(PRESETS["test-tiny"], "tinystories", tmp_path / "r", progress=False)
    assert checkpoint_steps(tmp_path / "r") == [10]
    logged = [json.loads(l)["step"] for l in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert max(logged) == 14


# ---- impossible shapes ----

@pytest.mark.parametrize("change, needle", [
    (lambda m: dict(d_model=96, ffw=dataclasses.replace(m.ffw, d_model=96)), "multiple of head_dim"),
    (lambda m: dict(ffw=dataclasses.replace(m.ffw, d_ffw=250)), "perfect square"),
    (lambda m: dict(ffw=dataclasses.replace(m.ffw, d_ffw=64, k=8)), "k must be smaller"),
])
def test_impossible_shapes(tmp_path, change, needle):
    cfg = PRESETS["test-tiny"]
    with pytest.raises(ValueError, match=needle) as e:
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, **change(cfg.model)))
        train(cfg, "tinystories", tmp_path / "r", progress=False)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "r").exists(), "nothing is written for an impossible config"


# ---- circuit databases of another model or an older schema ----

def test_circuit_database_of_another_model_or_schema(tmp_path, data_dir, run20):
    db = tmp_path / "db"
    res = run_sgatlin(["record", "--run", str(run20), "--out", str(db), "--n-docs", "12", "--quiet"], data_dir)
    assert res.returncode == 0, res.stderr[-2000:]
    other = tmp_path / "other"
    assert _train(other, data_dir, "--steps", "5").returncode == 0
    original = (db / "manifest.json").read_bytes()
    manifest = json.loads(original)
    before = snapshot(db)
    line = _fails(run_in_process(["neighbours", "The dog.", "--run", str(other), "--db", str(db), "--out",
                               str(tmp_path / "nb"), "--layer", "1", "--quiet"], data_dir), "model.params: database")
    assert manifest["model"]["params"] in line, "the database's fingerprint is shown"
    assert line.count("'") >= 4, "and the run's next to it"
    (db / "manifest.json").write_text(json.dumps({**manifest, "schema_version": 0}))
    _fails(run_in_process(["neighbours", "The dog.", "--run", str(run20), "--db", str(db), "--out", str(tmp_path / "nb"),
                        "--layer", "1", "--quiet"], data_dir), "schema version 0", "reads version 1")
    (db / "manifest.json").write_bytes(original)
    assert snapshot(db) == before and not (tmp_path / "nb").exists()


# ---- numbers out of range, impossible memory, a full disk ----

def _positionals(parser) -> list[str]:
    return ["x" for a in parser._actions if not a.option_strings and a.dest != "help"]


def test_every_numeric_option_of_every_command_gets_one_line(capsys):
    "Each numeric option has a range (NUMBER_MIN); a value below it, or NaN, is refused in one line naming the option."
    from sgatlin_nb.cli import ABOVE_MIN, COMMANDS, NUMBER_MIN, command_parser, main
    checked = 0
    for name in COMMANDS:
        parser = command_parser(name)
        numeric = {a.dest: a for a in parser._actions if a.type in (int, float)}
        assert set(numeric) <= set(NUMBER_MIN), f"sgatlin {name}: no range for {set(numeric) - set(NUMBER_MIN)}"
        for dest, action in numeric.items():
            flag = max(action.option_strings, key=len)
            low = NUMBER_MIN[dest]
            bad = [] if low is None else [low if dest in ABOVE_MIN else low - 1]
            if action.type is float: bad.append(float("nan"))
            for value in bad:
                assert main([name, *_positionals(parser), flag, str(value)]) == 2, (name, flag, value)
                err = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
                assert len(err) == 1 and err[0].startswith(f"sgatlin {name}: error: {flag} must be"), (name, flag, err)
                checked += 1
    assert checked >= 25, checked


def test_object_storage_urls_are_one_line(tmp_path, data_dir, run20):
    "A URL where a folder or file goes (`--out s3://...`) is refused before anything is written: no local `s3:` folder."
    _fails(run_in_process(["train", "--config", "test-tiny", "--out", "s3://bucket/run", "--steps", "2"], data_dir, cwd=tmp_path),
           "--out s3://bucket/run is a URL", "mount a bucket", "--mirror s3://bucket/run")
    _fails(run_in_process(["eval", "--run", "gs://bucket/run"], data_dir, cwd=tmp_path), "--run gs://bucket/run is a URL")
    line = _fails(run_in_process(["record", "--run", str(run20), "--data", "https://example.org/stories.txt", "--out", "db"],
                                 data_dir, cwd=tmp_path), "--data https://example.org/stories.txt is a URL")
    assert "--mirror" not in line, line  # only training keeps a copy in object storage
    # --mirror takes a URL, of a filesystem fsspec knows and can reach with what is installed
    _fails(run_in_process(["train", "--config", "test-tiny", "--out", "r", "--mirror", "bucket/run"], data_dir, cwd=tmp_path),
           "--mirror takes a URL such as gs://bucket/run")
    _fails(run_in_process(["train", "--config", "test-tiny", "--out", "r", "--mirror", "nosuch://bucket/run"], data_dir, cwd=tmp_path),
           "--mirror nosuch://bucket/run: Protocol not known")
    assert os.listdir(tmp_path) == [], os.listdir(tmp_path)


def test_empty_prompt_and_bad_profile_window(tmp_path, data_dir, run20):
    _fails(run_in_process(["sample", "--run", str(run20), "--prompt", ""], data_dir), "--prompt is empty")
    _fails(run_in_process(["sample", "--run", str(run20), "--prompt", "Once", "--n-tokens", "0"], data_dir),
           "--n-tokens must be at least 1")
    _fails(_refused_train(tmp_path / "p", data_dir, "--steps", "5", "--profile", "3"), "--profile takes START:STOP")
    _fails(_refused_train(tmp_path / "p", data_dir, "--steps", "5", "--profile", "4:9"), "needs 0 <= START < STOP <= steps (5)")
    _fails(_refused_train(tmp_path / "p", data_dir, "--lr", "-1"), "--lr must be greater than 0")
    _fails(_refused_train(tmp_path / "p", data_dir, "--batch-size", "0"), "--batch-size must be at least 1")
    assert not (tmp_path / "p").exists()


def test_a_run_that_cannot_fit_is_refused_before_anything_is_written(tmp_path, data_dir):
    "The paper's TinyStories model at a batch no machine holds: one line with the sizes and what would fit, no folder."
    out = tmp_path / "big"
    res = run_sgatlin(["train", "--config", "tinystories", "--batch-size", "65536", "--out", str(out), "--quiet"], data_dir)
    line = _fails(res, "GB per device", "activations", "try --batch-size", "--skip-memory-check")
    needs, has = (float(x) for x in re.search(r"needs about ([\d.]+) GB per device .* has ([\d.]+) GB", line).groups())
    assert needs > has, line
    assert not out.exists()


def _as_root(*cmd) -> list[str]:
    return list(cmd) if os.geteuid() == 0 else ["sudo", "-n", *cmd]


def test_a_full_disk_during_a_checkpoint_says_so_and_resume_continues(tmp_path, data_dir, run20):
    """A real full disk: the run on a tmpfs with room for its data and one checkpoint, not two. The second save fails in
    one line naming the last good checkpoint, leaves no partial checkpoint, and --resume continues once there is room."""
    size = lambda p: sum(f.stat().st_size for f in Path(p).rglob("*") if f.is_file())
    ckpt = size(run20 / "checkpoints" / "10")
    base = size(run20) - size(run20 / "checkpoints")
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = subprocess.run(_as_root("mount", "-t", "tmpfs", "-o", f"size={base + ckpt * 3 // 2 + (1 << 20)}", "tmpfs", str(disk)),
                           capture_output=True, text=True)
    assert mount.returncode == 0, f"this test mounts a small tmpfs, as root or through sudo -n: {mount.stderr}"
    try:
        run = disk / "run"
        line = _fails(_train(run, data_dir, "--steps", "20"), f"the disk holding {run} is full",
                      "checkpoint step 20 could not be written", "last good checkpoint is step 10", "--resume")
        assert checkpoint_steps(run) == [10] and not list((run / "checkpoints").glob("20*")), line
        before = snapshot(run)
        subprocess.run(_as_root("mount", "-o", f"remount,size={4 * (base + ckpt)}", str(disk)), check=True)
        assert snapshot(run) == before
        res = _train(run, data_dir, "--steps", "20", "--resume")
        assert res.returncode == 0 and '"start_step": 10' in res.stdout, res.stderr[-2000:]
        assert checkpoint_steps(run) == [10, 20]
    finally:
        subprocess.run(_as_root("umount", str(disk)), capture_output=True)


def test_attention_that_cannot_run_is_refused_before_anything_is_written(tmp_path, data_dir):
    "cuDNN attention off a GPU, or an attention that does not exist: one line, and no run folder left behind."
    for value, needle in (("cudnn", "--attention cudnn needs a CUDA GPU"), ("flash", "must be one of ['auto', 'cudnn', 'xla']")):
        out = tmp_path / value
        _fails(_refused_train(out, data_dir, "--attention", value), needle)
        assert not out.exists(), sorted(out.rglob("*"))


# ---- nothing a user already has is overwritten: task results, mirrors, two writers (issue 66) ----

def test_eval_tasks_never_replaces_a_file_it_did_not_make(tmp_path, data_dir, run20):
    """`eval --tasks --results FILE` refuses a FILE that is there before it scores anything (a run's own run.json even
    with --overwrite), and so does an existing RUN/tasks.json without --overwrite; with it, tasks.json is replaced."""
    run = _copy(run20, tmp_path)
    (run / "tasks.json").write_text("my notes")
    (tmp_path / "mine.json").write_text("mine")
    before = snapshot(tmp_path)
    ask = lambda *extra: run_in_process(["eval", "--run", str(run), "--tasks", "zorro", "--limit", "2", *extra], data_dir)
    for extra in ([], ["--overwrite"]):
        _fails(ask("--results", str(run / "run.json"), *extra), f"{run / 'run.json'} belongs to the run or model in {run}")
    _fails(ask("--results", str(tmp_path / "mine.json")), f"{tmp_path / 'mine.json'} already exists: pass --overwrite")
    _fails(ask(), f"{run / 'tasks.json'} already exists: pass --overwrite to replace it")
    assert snapshot(tmp_path) == before
    res = ask("--overwrite")
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads((run / "tasks.json").read_text())["tasks"]["zorro"]["items"] == 2
    assert [p.name for p in run.iterdir() if p.name.startswith(".tasks.json")] == []  # written through a temporary name


def test_resume_from_a_mirror_copies_nothing_over_the_files_in_out(tmp_path, data_dir, run20):
    """`train --resume --mirror URL --out DIR` looks at DIR before it copies anything: files there without a run.json
    (a tokenizer, metrics, samples of the user's) are refused in one line, and DIR stays as it was."""
    from sgatlin_nb.runs import push_run
    url = f"file://{tmp_path / 'mirror'}"
    push_run(run20, url, 20)
    out = tmp_path / "out"
    out.mkdir()
    for name in ("tokenizer.json", "metrics.jsonl", "samples.txt"): (out / name).write_text(f"my {name}")
    before = snapshot(out), snapshot(tmp_path / "mirror")
    _fails(_refused_train(out, data_dir, "--steps", "20", "--resume", "--mirror", url),
           f"{out} holds metrics.jsonl, samples.txt, tokenizer.json but no run.json", "choose a new or empty --out")
    (out / "run.json").write_text("{cut")
    _fails(_refused_train(out, data_dir, "--steps", "20", "--resume", "--mirror", url), f"{out / 'run.json'} is not valid JSON")
    (out / "run.json").unlink()
    assert (snapshot(out), snapshot(tmp_path / "mirror")) == before


def test_a_mirror_that_holds_anything_but_this_run_is_refused(tmp_path, data_dir):
    """A mirror location without checksums is not empty when it holds files: another tool's, or a tokenizer and a
    step's files without the run.json of this run, are refused before anything is written, and stay as they were."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    url = f"file://{mirror}"
    (mirror / "notes.txt").write_text("mine")
    before = snapshot(mirror)
    _fails(_refused_train(tmp_path / "new", data_dir, "--steps", "2", "--mirror", url),
           f"the mirror {url} holds files that are no sgatlin run's (notes.txt)", "choose an empty --mirror")
    assert snapshot(mirror) == before and not (tmp_path / "new").exists()
    (mirror / "notes.txt").unlink()
    (mirror / "tokenizer.json").write_text("my tokenizer")
    (mirror / "checkpoints" / "7").mkdir(parents=True)
    (mirror / "checkpoints" / "7" / "part").write_text("mine too")
    before = snapshot(mirror)
    _fails(_refused_train(tmp_path / "new", data_dir, "--steps", "2", "--mirror", url),
           f"the mirror {url} holds checkpoints, tokenizer.json but no run.json")
    assert snapshot(mirror) == before and not (tmp_path / "new").exists()



def test_a_mirror_without_or_with_a_damaged_run_json(tmp_path, data_dir, run20):
    """A mirror that lost its run.json filled the empty --out and then blamed it; one whose run.json is damaged gave a
    JSON error naming no file. Both are now one line naming the mirror, before anything is copied."""
    from sgatlin_nb.runs import push_run
    mirror = tmp_path / "mirror"
    url = f"file://{mirror}"
    push_run(run20, url, 20)
    (mirror / "run.json").unlink()
    before = snapshot(mirror)
    _fails(_refused_train(tmp_path / "out", data_dir, "--steps", "20", "--resume", "--mirror", url),
           f"the mirror {url} holds checkpoints, checksums, metrics.jsonl, samples.txt, tokenizer.json but no run.json")
    (mirror / "run.json").write_text("{cut")
    _fails(_refused_train(tmp_path / "out", data_dir, "--steps", "20", "--resume", "--mirror", url),
           f"the mirror {url} holds no readable run.json (Expecting property name")
    (mirror / "run.json").unlink()
    assert snapshot(mirror) == before and not (tmp_path / "out").exists()


def test_two_runs_on_one_mirror_cannot_delete_each_others_checkpoints(tmp_path, data_dir, run20):
    """A run started on an empty mirror leaves a lock there naming its process; a second run on that mirror (a real
    `sgatlin train` holds it) is refused in one line and copies nothing, and so is a push. Once the holder has
    ended, its lock is replaced."""
    from sgatlin_nb.runs import push_run
    mirror = tmp_path / "mirror"
    url = f"file://{mirror}"
    holder = subprocess.Popen(sgatlin_cmd() + ["train", "--config", "test-tiny", "--data", "tinystories", "--out", str(tmp_path / "a"),
                                               "--steps", "1000", "ckpt_every=1000", "eval_every=1000", "--quiet", "--mirror", url],
                              env={**os.environ, "JAX_PLATFORMS": "cpu", "SGATLIN_DATA_DIR": str(data_dir)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lock = mirror / "lock.json"
    try:
        deadline = time.time() + 300
        while not (lock.exists() or (tmp_path / "a" / "run.json").exists()) and holder.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert lock.exists() and json.loads(lock.read_text())["pid"] == holder.pid, holder.poll()
        before = snapshot(mirror)
        _fails(_refused_train(tmp_path / "b", data_dir, "--steps", "2", "--mirror", url),
               f"the mirror {url} is in use by another sgatlin train (pid {holder.pid}", "choose another --mirror")
        with pytest.raises(RunError, match=f"is in use by another sgatlin train \\(pid {holder.pid}"):
            push_run(run20, url, 20)
        assert snapshot(mirror) == before and not (tmp_path / "b").exists()
    finally:
        holder.kill()
        holder.wait()
    push_run(run20, url, 20)  # the holder is gone: its lock is this process's now
    assert json.loads(lock.read_text())["pid"] == os.getpid()


def test_export_on_a_full_disk_leaves_nothing(tmp_path, data_dir, run20):
    """`export` into a tmpfs too small for it: one line, and nothing of the export left (a cut tokenizer.json made the
    rerun refuse "not empty"); the same command works once there is room."""
    size = lambda p: sum(f.stat().st_size for f in Path(p).rglob("*") if f.is_file())
    tokenizer = (run20 / "tokenizer.json").stat().st_size
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = subprocess.run(_as_root("mount", "-t", "tmpfs", "-o", f"size={tokenizer + (256 << 10)}", "tmpfs", str(disk)),
                           capture_output=True, text=True)
    assert mount.returncode == 0, f"this test mounts a small tmpfs, as root or through sudo -n: {mount.stderr}"
    try:
        out = disk / "export"
        res = run_in_process(["export", "--run", str(run20), "--out", str(out)], data_dir)
        assert sorted(str(p.relative_to(disk)) for p in disk.rglob("*")) == [], res.stderr
        _fails(res, f"the disk holding {out} is full", "nothing of it was left there")
        subprocess.run(_as_root("mount", "-o", f"remount,size={4 * size(run20)}", str(disk)), check=True)
        res = run_in_process(["export", "--run", str(run20), "--out", str(out)], data_dir)
        assert res.returncode == 0 and sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"], res.stderr
    finally:
        subprocess.run(_as_root("umount", str(disk)), capture_output=True)


def test_eval_beside_a_live_run_reads_the_newest_checkpoint(tmp_path, run20, monkeypatch):
    """A trainer that keeps one checkpoint saves step 30, then removes step 20 file by file while it is read: the reader
    waits for the removal and reads step 30, instead of calling step 20 damaged and saying to train again (1 in 8)."""
    import threading
    import sgatlin_nb.runs as runs
    run = _copy(run20, tmp_path)
    real, calls = runs.read_params, []
    def rotating(r, step, params):
        if not calls:  # the trainer, between the listing and the read: step 30 saved, step 20's first file removed
            shutil.copytree(run / "checkpoints" / "20", run / "checkpoints" / "30")
            shutil.copy(run / "checksums" / "20.json", run / "checksums" / "30.json")
            next(p for p in sorted((run / "checkpoints" / "20").rglob("*")) if p.is_file()).unlink()
            threading.Timer(0.3, shutil.rmtree, [run / "checkpoints" / "20"]).start()
        calls.append(step)
        return real(r, step, params)
    monkeypatch.setattr(runs, "read_params", rotating)
    *_, at = runs.load_run(run)
    assert (calls, at) == ([20, 30], 30)


def test_a_damaged_mirror_gives_its_newest_good_checkpoint(tmp_path, data_dir, run20, capsys):
    """A mirror whose newest checkpoint is damaged, or has lost its files: the pull verifies each step against its
    checksums, says which one is damaged and takes the one before (training restarted from step 0); a mirror with no
    whole checkpoint is one line."""
    from sgatlin_nb.runs import checkpoint_damage, pull_run, push_run
    mirror = tmp_path / "mirror"
    url = f"file://{mirror}"
    for step in (10, 20): push_run(run20, url, step)
    part = max((p for p in (mirror / "checkpoints" / "20").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    part.write_bytes(part.read_bytes()[:-1] + bytes([part.read_bytes()[-1] ^ 1]))
    out = tmp_path / "out"
    assert pull_run(url, out) == 10 and checkpoint_steps(out) == [10] and checkpoint_damage(out, 10) is None
    assert f"note: checkpoint 20 of the mirror {url} is damaged ({part.relative_to(mirror / 'checkpoints' / '20')} changed since it was written" \
        in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["checkpoints", "checksums", "metrics.jsonl", "run.json", "samples.txt", "tokenizer.json"]
    shutil.rmtree(mirror / "checkpoints" / "20")  # its files gone, its checksums still there
    assert pull_run(url, tmp_path / "out2") == 10 and "none of its files are there" in capsys.readouterr().err
    shutil.rmtree(mirror / "checkpoints" / "10")
    with pytest.raises(RunError, match=f"the mirror {url} holds no checkpoint that is whole"):
        pull_run(url, tmp_path / "out3")
    assert not (tmp_path / "out3" / "run.json").exists()


def test_a_fifo_tokenizer_is_one_line(tmp_path, data_dir):
    "`--tokenizer FIFO` waited for a writer forever (Ctrl-C did not end it): now one line, before anything is written."
    fifo = tmp_path / "tok.fifo"
    os.mkfifo(fifo)
    _fails(run_sgatlin(["train", "--config", "test-tiny", "--steps", "2", "--quiet", "--out", str(tmp_path / "r"),
                        "--tokenizer", str(fifo)], data_dir, timeout=90), f"--tokenizer {fifo} is a FIFO, not a file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok.fifo"]


def test_resume_into_a_missing_folder_says_it_starts_a_new_run(tmp_path, data_dir):
    "`--resume` into a folder that does not exist (and no --mirror) starts a new run, and now says so."
    res = _refused_train(tmp_path / "new", data_dir, "--steps", "2", "--resume")
    assert res.returncode == 0 and f"note: --resume: {tmp_path / 'new'} does not exist, so a new run starts there" in res.stderr, res.stderr


def test_a_run_that_ends_releases_its_mirror_lock(tmp_path, data_dir, monkeypatch):
    """The mirror's lock.json stayed after the run that wrote it had ended, so the bucket seemed in use by a run that no
    longer was. Now a run that ends (its last step, an error, a signal that checkpoints) removes the lock if it is still
    its own; a run resumed from that mirror into a new folder works, and leaves no lock either."""
    from sgatlin_nb.data import DataError
    mirror = tmp_path / "mirror"
    url = f"file://{mirror}"
    res = _train(tmp_path / "a", data_dir, "--steps", "2", "--mirror", url)
    assert res.returncode == 0, res.stderr[-2000:]
    assert not (mirror / "lock.json").exists() and mirror_steps_of(mirror) == [2]
    res = _refused_train(tmp_path / "b", data_dir, "--steps", "2", "--resume", "--mirror", url)
    assert res.returncode == 0 and checkpoint_steps(tmp_path / "b") == [2], res.stderr[-2000:]
    assert not (mirror / "lock.json").exists()
    def no_data(*args, **kwargs): raise DataError("no data here")  # an error once the run holds the mirror
    monkeypatch.setattr(train_mod, "prepare_data", no_data)
    before = snapshot(mirror)
    _fails(_refused_train(tmp_path / "c", data_dir, "--steps", "2", "--resume", "--mirror", url), "no data here")
    assert snapshot(mirror) == before
    # stopped by a signal that checkpoints (Slurm's SIGTERM): the stopped step is copied, then the lock goes
    mirror2, out = tmp_path / "mirror2", tmp_path / "d"
    proc = subprocess.Popen(sgatlin_cmd() + ["train", "--config", "test-tiny", "--data", "tinystories", "--out", str(out), "--steps",
                                             "1000", "ckpt_every=1000", "eval_every=1000", "--quiet", "--mirror", f"file://{mirror2}"],
                            env={**os.environ, "JAX_PLATFORMS": "cpu", "SGATLIN_DATA_DIR": str(data_dir)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 300
        while not (out / "metrics.jsonl").exists() and proc.poll() is None and time.time() < deadline: time.sleep(0.05)
        while '"loss"' not in (out / "metrics.jsonl").read_text() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)  # a step is logged: the loop, which turns SIGTERM into a checkpoint, runs
        assert proc.poll() is None and (mirror2 / "lock.json").exists(), proc.poll()
        proc.send_signal(signal.SIGTERM)
        stderr = proc.communicate(timeout=300)[1]
    finally:
        if proc.poll() is None: proc.kill()
    assert proc.returncode > 0 and "SIGTERM at step" in stderr, stderr[-2000:]
    assert not (mirror2 / "lock.json").exists() and mirror_steps_of(mirror2) == checkpoint_steps(out) != [], stderr[-2000:]


def mirror_steps_of(mirror: Path) -> list[int]:
    return sorted(int(p.stem) for p in (mirror / "checksums").glob("*.json"))


def test_a_fifo_corpus_is_one_line(tmp_path, data_dir):
    "`--data FIFO` waited for a writer forever, as `--tokenizer FIFO` did: now one line naming it by type, nothing written."
    fifo = tmp_path / "corpus.fifo"
    os.mkfifo(fifo)
    _fails(run_sgatlin(["train", "--config", "test-tiny", "--steps", "2", "--quiet", "--out", str(tmp_path / "r"),
                        "--data", str(fifo)], data_dir, timeout=90), f"corpus {fifo} is a FIFO, not a file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.fifo"]


@pytest.mark.parametrize("kind", ["socket", "device"])
def test_a_socket_or_device_corpus_is_one_line(tmp_path, data_dir, kind):
    """A socket where a corpus is read gave a raw `[Errno 6] No such device or address`, and a device (/dev/null) "holds
    no documents": each is now refused by type in one line, before anything is written."""
    import socket
    from sgatlin_nb.reference import reference_run
    path, sock = Path("/dev/null"), None
    if kind == "socket":
        path, sock = tmp_path / "corpus.sock", socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
    try:
        _fails(run_in_process(["record", "--run", str(reference_run()), "--data", str(path), "--out", str(tmp_path / "db"),
                               "--n-docs", "2", "--quiet"], data_dir), f"corpus {path} is a {kind}, not a file")
    finally:
        if sock is not None: sock.close()
    assert not (tmp_path / "db").exists()
