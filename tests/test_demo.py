"`sgatlin demo` end to end, as a user runs it: killed during training, resumed, rerun (nothing redone), and bad input."
import json
import math
import os
import signal
import subprocess
import time

from conftest import ROOT, run_sgatlin, sgatlin_cmd

STAGES = ['train', 'record', 'embedding', 'neighbours', 'patching', 'usage', 'report']
TINY = ["--config", "test-tiny", "--n-stories", "12", "--quiet"]


def _checkpoints(out):
    d = out / "run" / "checkpoints"
    return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit()) if d.exists() else []


def _one_line_error(res):
    assert res.returncode == 2, (res.returncode, res.stdout[-1000:], res.stderr[-2000:])
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("sgatlin demo: error:"), res.stderr[-2000:]
    return lines[0]


def test_demo_bad_input(tmp_path, data_dir):
    nope = str(tmp_path / "nope.txt")
    line = _one_line_error(run_sgatlin(["demo", "--out", str(tmp_path / "d"), "--data", nope, *TINY], data_dir))
    assert "cannot read the corpus" in line and not (tmp_path / "d").exists()
    assert line.count(nope) == 2 and line.count("pass ") == 1, line  # named, looked at once (an absolute path), one piece of advice

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("not a demo")
    line = _one_line_error(run_sgatlin(["demo", "--out", str(tmp_path / "mine"), *TINY], data_dir))
    assert "holds no sgatlin demo" in line and os.listdir(tmp_path / "mine") == ["notes.txt"]

    _one_line_error(run_sgatlin(["demo", "--out", str(tmp_path / "d"), "--config", "huge"], data_dir))


def test_demo_on_the_reference_model(tmp_path, data_dir):
    "`--reference` analyses the committed model without training, and its copy in `out/run` works with `sgatlin eval`."
    from sgatlin_nb.reference import check_reference
    manifest = check_reference()
    out = tmp_path / "ref"
    res = run_sgatlin(["demo", "--reference", "--out", str(out), "--n-stories", "12", "--quiet"], data_dir)
    assert res.returncode == 0, res.stderr[-2000:]
    status = [l for l in res.stdout.splitlines() if l.startswith("[")]
    assert len(status) == len(STAGES) and "the committed reference model" in status[0], res.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["settings"]["reference"] == manifest["fingerprint"]
    assert not (out / "run" / "checkpoints").exists()  # nothing was trained
    # the demo shows the committed model's full held-out score (191k tokens, too slow to repeat here); a fresh
    # `sgatlin eval` of its copy, in a new shell without a data folder, scores the first 16,384 held-out tokens as the
    # manifest's head check did on the committed files: the copy is that model, on those tokens
    ev = run_sgatlin(["eval", "--run", str(out / "run"), "--tokens", str(manifest["eval"]["head_tokens"])], "")
    assert ev.returncode == 0, ev.stderr[-2000:]
    fresh = json.loads(ev.stdout)
    assert fresh["step"] == manifest["step"] and fresh["eval_tokens"] == manifest["eval"]["head_tokens"], fresh
    assert abs(fresh["eval_loss"] - manifest["eval"]["head_loss"]) < 1e-4, (fresh, manifest["eval"])
    bad = run_sgatlin(["demo", "--reference", "--steps", "10", "--out", str(tmp_path / "x")], data_dir)
    assert bad.returncode == 2 and "leave out --config and --steps" in bad.stderr


def test_default_demo_patching_panel_holds_a_result():
    "The committed run of the default `sgatlin demo` (16_demo writes it): its patching panel has an NIE over 10 or more known pairs."
    from sgatlin_nb.demo import demo_settings
    full = json.loads((ROOT / "nbs" / "results" / "demo_summary.json").read_text())
    assert full["settings"] == demo_settings()[1], "the committed summary is not today's default demo: rerun 16_demo with run_full"
    n = full["numbers"]
    assert n["nie_known_pairs"] >= 10 and isinstance(n["nie"], float) and math.isfinite(n["nie"]), n
    assert n["nie_pairs"] == n["nie_nouns"] * (n["nie_nouns"] - 1) and n["nie_known_shuffled"] is not None, n


# What the committed summary may differ by when the code or the processor differs (measured 2026-11-28: today's code
# on this 2-core machine against the committed run of src-c9b040bb2b7c): held-out loss 1.9e-4, final training loss 1.0e-4,
# neuron use 2.1%, Gini 1.0%; the NIE moved 10% and its known pairs 17%, so those are not compared, only their ranges.
# Remeasured 2026-12-02 (today's code, src-f0871c6db6b5, uninterrupted runs on two machines): held-out loss 6e-4 apart,
# known pairs 20 and 38, NIE 0.60 and 0.89; over training seeds 0 to 3 (16_demo, results/demo_seeds.json) 38 to 62
# known pairs, NIE 0.60 to 0.89. A known pair is a threshold test, so its count moves with the smallest change.
DRIFT = {"eval_loss": 2e-3, "train_loss": 2e-3, "fraction_used": 0.05, "gini": 0.03, "gini_distinct_tokens": 0.03}
EXACT = ("unigram_loss", "unigram_ppl", "circuits", "nie_nouns", "nie_pairs", "uniform_gini_distinct_tokens")


def check_summary(got: dict, want: dict):
    "`got` matches the committed summary `want`: the same settings, equal where the data decide, within `DRIFT` elsewhere."
    assert got["settings"] == want["settings"], "the committed summary is not of today's default `sgatlin demo`"
    g, w = got["numbers"], want["numbers"]
    for k in EXACT: assert g[k] == w[k], (k, g[k], w[k])
    for k, tol in DRIFT.items(): assert abs(g[k] / w[k] - 1) <= tol, (k, g[k], w[k], tol)
    assert g["nie_known_pairs"] >= 10 and 0 < g["nie"] < 2 and g["eval_ppl"] < g["unigram_ppl"] / 4, g


def test_the_readme_main_command_reproduces_the_committed_summary(tmp_path):
    """The README's main command as written (after its install), in a new folder: `sgatlin demo` with the default
    settings, about 3 minutes on two cores, killed (SIGKILL) once a checkpoint is written and typed again, as a user
    whose machine went down would. The second run resumes training from that checkpoint; its summary equals the
    committed `results/demo_summary.json` in everything the data alone decide, and the trained model's numbers lie within
    the drift measured between code versions (a copy of the committed file broken on purpose is refused). A fresh
    `sgatlin eval` of the final checkpoint scores the summary's held-out loss, and a third run redoes nothing."""
    import copy
    import pytest
    readme = (ROOT / "README.md").read_text()
    line = next(l for l in readme.splitlines() if "pip install -e ." in l and "sgatlin demo" in l)
    command = line.split("&&")[-1].split()
    assert command == [".venv/bin/sgatlin", "demo"], line  # the main job is the default demo
    out = tmp_path / "runs" / "demo"
    env = {k: v for k, v in os.environ.items() if k != "SGATLIN_DATA_DIR"}  # as in a new shell: the repository's samples
    proc = subprocess.Popen(sgatlin_cmd() + command[1:], cwd=tmp_path, env={**env, "JAX_PLATFORMS": "cpu"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while not [c for c in _checkpoints(out) if c > 0] and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "training finished (or failed) before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = max(_checkpoints(out))
    steps = json.loads((ROOT / "nbs" / "results" / "demo_summary.json").read_text())["settings"]["train"]["steps"]
    assert 0 < killed_at < steps, (killed_at, steps)

    res = run_sgatlin(command[1:], None, cwd=tmp_path, timeout=1500)
    assert res.returncode == 0, res.stderr[-3000:]
    status = [l for l in res.stdout.splitlines() if l.startswith("[")]
    assert len(status) == len(STAGES) and "resumed at step" in status[0], res.stdout
    state = json.loads((out / "demo.json").read_text())
    assert state["stages"]["train"]["start_step"] >= killed_at and state["stages"]["train"]["steps"] == steps, state
    got = json.loads((out / "summary.json").read_text())
    want = json.loads((ROOT / "nbs" / "results" / "demo_summary.json").read_text())
    g, w = got["numbers"], want["numbers"]
    print(f"code {got['code']} against the committed {want['code']}, resumed from step {killed_at}: " + ", ".join(
        f"{k} {g[k]:.4g} vs {w[k]:.4g}" for k in (*DRIFT, "nie", "nie_known_pairs", "eval_ppl")))
    check_summary(got, want)
    for key, factor in (("eval_loss", 1.01), ("unigram_ppl", 1.0001), ("fraction_used", 0.9)):
        broken = copy.deepcopy(want)
        broken["numbers"][key] *= factor
        with pytest.raises(AssertionError): check_summary(got, broken)
    assert [got["stages"][s]["status"] for s in STAGES] == ["ran"] * len(STAGES)
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 5 and "6. Where the time went" in page
    assert g["nie_pairs"] == g["nie_nouns"] * (g["nie_nouns"] - 1) and g["nie_nouns"] >= 20, g  # every ordered pair of the pool

    # the demo's held-out loss is the training log's: a fresh `sgatlin eval` of the final checkpoint scores the same
    ev = run_sgatlin(["eval", "--run", str(out / "run")], "")
    assert ev.returncode == 0, ev.stderr[-2000:]
    fresh = json.loads(ev.stdout)
    assert fresh["step"] == steps and abs(fresh["eval_loss"] - g["eval_loss"]) < 1e-5, (fresh, g)

    # the third run redoes nothing
    last = out / "run" / "checkpoints" / str(steps)
    mtime, report = last.stat().st_mtime_ns, (out / "report.html").read_bytes()
    res = run_sgatlin(command[1:], None, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    again = json.loads((out / "summary.json").read_text())
    assert [again["stages"][s]["status"] for s in STAGES] == ["skipped"] * len(STAGES)
    assert last.stat().st_mtime_ns == mtime and (out / "report.html").read_bytes() == report and again["numbers"] == g
