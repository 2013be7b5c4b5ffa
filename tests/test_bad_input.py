"Bad input ends with one line saying what to do, and never overwrites or deletes a good checkpoint."
import dataclasses
import shutil
from pathlib import Path

import pytest

from conftest import run_sgatlin
from sgatlin_nb.train import PRESETS, RunError, train


def _fails(res, *needles):
    assert res.returncode == 2, (res.returncode, res.stdout[-1000:], res.stderr[-2000:])
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("sgatlin "), res.stderr[-2000:]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def _train(out, data_dir, *extra, data="tinystories"):
    return run_sgatlin(["train", "--config", "test-tiny", "--data", data, "--out", str(out), "--quiet", *extra], data_dir)


def test_missing_corpus(tmp_path, data_dir):
    _fails(_train(tmp_path / "r", data_dir, data=str(tmp_path / "no_such_file.txt")), "no_such_file.txt")
    assert not (tmp_path / "r" / "checkpoints").exists()


def test_empty_corpus(tmp_path, data_dir):
    (tmp_path / "empty.txt").write_text("")
    _fails(_train(tmp_path / "r", data_dir, data=str(tmp_path / "empty.txt")), "empty")


def test_non_utf8_corpus(tmp_path, data_dir):
    (tmp_path / "bad.txt").write_bytes(b"Once upon a time\n\xff\xfe there was a dog.\n")
    _fails(_train(tmp_path / "r", data_dir, data=str(tmp_path / "bad.txt")), "bad.txt", "UTF-8")


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


def test_out_dir_holding_another_run_and_corrupt_checkpoint(tmp_path, data_dir):
    out = tmp_path / "r"
    assert _train(out, data_dir, "--steps", "20").returncode == 0
    ckpts = out / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir() if p.name.isdigit()) == ["10", "20"]

    _fails(_train(out, data_dir, "--steps", "20"), "already holds a run", "--resume")
    _fails(_train(out, data_dir, "--steps", "30", "--resume"), "differs in: steps")
    (tmp_path / "other").mkdir(); (tmp_path / "other" / "notes.txt").write_text("mine")
    _fails(_train(tmp_path / "other", data_dir), "not empty")
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"

    # corrupt the newest checkpoint: every array file overwritten with garbage
    before = sorted(str(p.relative_to(out)) for p in ckpts.rglob("*"))
    for f in (ckpts / "20").rglob("*"):
        if f.is_file() and f.name not in ("_CHECKPOINT_METADATA", "commit_success.txt"):
            f.write_bytes(b"garbage")
    line = _fails(_train(out, data_dir, "--steps", "20", "--resume"), "checkpoint step 20", "cannot be read",
                  "resume from step 10")
    assert "nothing was deleted" in line
    assert sorted(str(p.relative_to(out)) for p in ckpts.rglob("*")) == before, "no checkpoint file may be deleted"

    # following the advice works: move step 20 aside, resume from 10 and finish
    shutil.move(str(ckpts / "20"), str(tmp_path / "step20-corrupt"))
    res = _train(out, data_dir, "--steps", "20", "--resume")
    assert res.returncode == 0, res.stderr[-2000:]
    assert '"start_step": 10' in res.stdout


def test_partial_checkpoint_is_ignored(tmp_path, data_dir):
    out = tmp_path / "r"
    assert _train(out, data_dir, "--steps", "10").returncode == 0
    partial = out / "checkpoints" / "20.orbax-checkpoint-tmp-1234"
    partial.mkdir()
    (partial / "d").write_bytes(b"half written")
    res = _train(out, data_dir, "--steps", "10", "--resume")
    assert res.returncode == 0, res.stderr[-2000:]
    assert '"start_step": 10' in res.stdout
    assert partial.exists()


def test_eval_and_sample_need_a_run(tmp_path, data_dir):
    _fails(run_sgatlin(["eval", "--out", str(tmp_path / "none")], data_dir), "holds no sgatlin run")
    _fails(run_sgatlin(["sample", "--out", str(tmp_path / "none")], data_dir), "holds no sgatlin run")
