"""The committed reference model (nbs/09_reference.ipynb): its files are the manifest's, and its script still makes it.

CI does not retrain the model; it retrains its first steps with the committed script and checks that the
logged losses are the committed ones, so that the script and the weights cannot drift apart.
"""
import json
import os
import subprocess
import sys

import numpy as np

from conftest import ROOT


def test_files_and_fingerprint_match_the_manifest():
    from sgatlin_nb.reference import check_reference, reference_model, weights_fingerprint
    manifest = check_reference()
    cfg, tokenizer, graphdef, params, step = reference_model()
    assert weights_fingerprint(params) == manifest["fingerprint"]
    assert step == manifest["step"] and cfg.to_dict() == manifest["config"]
    assert cfg.model.n_layers == 4 and cfg.model.ffw.k == 8  # the paper's TinyStories depth and k
    assert manifest["weights"]["bytes"] <= 25 * 10**6


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
