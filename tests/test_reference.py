"""The committed reference model (nbs/09_reference.ipynb): its files are the manifest's, `export_reference` writes
that folder, and its script still makes it.

CI does not retrain the model; it retrains its first steps with the committed script and checks that the
logged losses are the committed ones, so that the script and the weights cannot drift apart.
"""
import dataclasses
import json
import os
import shutil
import subprocess
import sys

import jax
import ml_dtypes
import numpy as np
import pytest

from conftest import ROOT


def test_files_and_fingerprint_match_the_manifest():
    from sgatlin_nb.reference import REFERENCE_DIR, check_reference, reference_model, weights_fingerprint
    from sgatlin_nb.runs import exported
    manifest = check_reference()
    cfg, tokenizer, graphdef, params, step = reference_model()
    assert weights_fingerprint(params) == manifest["fingerprint"]
    assert step == manifest["step"] and cfg.to_dict() == manifest["config"]
    assert cfg.model.n_layers == 4 and cfg.model.ffw.k == 8  # the paper's TinyStories depth and k
    assert exported(REFERENCE_DIR)["step"] == manifest["step"]  # the folder `sgatlin export` writes
    assert sorted(p.name for p in REFERENCE_DIR.iterdir()) == sorted([*manifest["files"], "manifest.json"])
    assert manifest["weights"]["file"] == "model.safetensors" and manifest["weights"]["bytes"] <= 25 * 10**6


def test_export_reference_writes_the_committed_layout(tmp_path, data_dir, monkeypatch):
    """On a tiny run: the folder `export_reference` writes has the committed folder's files and manifest fields, passes
    its own check, holds the run's parameters rounded to bfloat16, and replaces a reference model but nothing else."""
    monkeypatch.setenv("SGATLIN_DATA_DIR", str(data_dir))
    from sgatlin_nb import reference
    from sgatlin_nb.data import read_texts
    from sgatlin_nb.reference import REFERENCE_DIR, check_reference, export_reference, reference_model, weights_fingerprint
    from sgatlin_nb.runs import RunError, code_identity, load_run
    from sgatlin_nb.configs import PRESETS
    from sgatlin_nb.train import train
    # held out: 50 validation stories instead of all 1,000 (three evaluations per export; the layout is what is tested)
    reference.write_stories(list(read_texts(reference.HELDOUT))[:50], tmp_path / "valid-50.txt")
    monkeypatch.setattr(reference, "HELDOUT", str(tmp_path / "valid-50.txt"))
    train(dataclasses.replace(PRESETS["test-tiny"], steps=5, warmup_steps=1), "tinystories", tmp_path / "run", progress=False)
    dest = tmp_path / "ref"
    shutil.copytree(REFERENCE_DIR, dest)  # a reference model already there: replaced, as the script replaces the committed one
    manifest = export_reference(tmp_path / "run", dest)
    committed = json.loads((REFERENCE_DIR / "manifest.json").read_text())
    assert sorted(p.name for p in dest.iterdir()) == sorted(p.name for p in REFERENCE_DIR.iterdir())
    assert list(manifest) == list(committed) and list(manifest["eval"]) == list(committed["eval"])
    assert {k: manifest[k] for k in ("format", "version")} == {k: committed[k] for k in ("format", "version")}
    # the code that trained the run (its run.json) and the code that exported it (this code) are both named
    assert manifest["code"] == {"trained": json.loads((tmp_path / "run" / "run.json").read_text())["code"], "exported": code_identity()}
    assert all(committed["code"][k].startswith("src-") for k in ("trained", "exported"))
    assert check_reference(dest) == manifest
    _, _, _, params, step = load_run(tmp_path / "run")
    _, _, _, stored, at = reference_model(dest)
    assert at == step == manifest["step"] == 5
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(stored)):
        assert b.dtype == np.float32 and np.array_equal(np.asarray(b), np.asarray(a).astype(ml_dtypes.bfloat16).astype(np.float32))
    assert manifest["fingerprint"] == weights_fingerprint(params) == weights_fingerprint(stored)
    (dest / "notes.txt").write_text("not the reference model's")  # a file it does not own: refused, nothing removed
    with pytest.raises(RunError, match="holds files that are not the reference model's \\(notes.txt\\)"):
        export_reference(tmp_path / "run", dest)
    assert sorted(p.name for p in dest.iterdir()) == sorted([*manifest["files"], "manifest.json", "notes.txt"])


def test_the_script_reproduces_the_first_logged_losses(tmp_path, data_dir):
    n = 3
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "SGATLIN_DATA_DIR": str(data_dir)}
    subprocess.run([sys.executable, str(ROOT / "scripts" / "train_reference.py"), "--work", str(tmp_path / "work"),
                    "--stop-at", str(n), "--no-progress"], check=True, env=env, timeout=900)
    from sgatlin_nb.reference import REFERENCE_DIR
    def losses(path):
        rows = [json.loads(l) for l in path.read_text().splitlines() if l]
        return np.array([r["loss"] for r in rows if "loss" in r][:n])
    committed, again = losses(REFERENCE_DIR / "metrics.jsonl"), losses(tmp_path / "work" / "run" / "metrics.jsonl")
    assert len(again) == n
    # the same code on another processor may round differently, but not this much in three steps
    np.testing.assert_allclose(again, committed, rtol=1e-3)
    stories = json.loads((tmp_path / "work" / "stories.json").read_text())
    manifest = json.loads((REFERENCE_DIR / "manifest.json").read_text())
    assert stories == manifest["data"]["stories"]  # the same training stories, byte for byte (SHA-256)
