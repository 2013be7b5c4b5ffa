"""Corpus text never runs as code, no command replaces a file it did not make, and the newer commands' bad inputs each
end in one line (issue 38).

Every case here failed on the code before the fix: the script injection ran its handler in Chromium, the overwrites
replaced or deleted the user's files, and the bad inputs gave tracebacks, silent acceptance or a wrong hint. The
commands run in this process (`main([...])`, as `sgatlin` runs them, without a start-up per case) on the committed
reference model; each refusal must return 2, print one `sgatlin COMMAND: error:` line holding the file or key, and
leave the folder it was pointed at byte-identical (`snapshot`).
"""
import dataclasses
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import ROOT, snapshot, start_chromium
from sgatlin_nb.cli import main
from sgatlin_nb.reference import reference_run

PAYLOAD = '</script><img src=x onerror=document.title=/owned/.source>'  # no quotes: JSON would escape them


def _refused(capsys, argv, *needles) -> str:
    "`sgatlin ARGV` returned 2 with one error line holding each needle."
    status = main(argv)
    err = capsys.readouterr().err
    lines = [l for l in err.splitlines() if l.strip()]
    assert status == 2 and len(lines) == 1 and lines[0].startswith(f"sgatlin {argv[0]}: error: "), (status, err[-2000:])
    for n in needles: assert n in lines[0], (n, lines[0])
    return lines[0]


# ---- corpus text in the HTML charts ----

@pytest.fixture(scope="module")
def hostile_db(tmp_path_factory, data_dir):
    "A circuit database of the reference model over 16 TinyStories stories with the payload after every sentence."
    from sgatlin_nb.record import record_run
    tmp = tmp_path_factory.mktemp("hostile")
    stories = (data_dir / "tinystories" / "valid_head_1000.txt").read_text().split("<|endoftext|>")
    stories = [s.strip() for s in stories if len(s.strip()) > 200][:16]
    assert len(stories) == 16
    corpus = tmp / "hostile.jsonl"
    corpus.write_text("".join(json.dumps({"text": re.sub(r"\. ", ". " + PAYLOAD + " ", s)}) + "\n" for s in stories))
    return record_run(reference_run(), tmp / "db", data=str(corpus), n_docs=None, progress=False), tmp


def _spec(html: str) -> tuple[str, dict]:
    "The chart spec as written in the page (raw JSON text) and as JavaScript reads it."
    raw = re.search(r"(?:var|const|let) spec = (\{.*?\});\n", html, re.S).group(1)
    return raw, json.loads(raw)


def test_chart_pages_keep_corpus_text_as_text_in_chromium(hostile_db, tmp_path):
    from sgatlin_nb.embedding import write_map
    from sgatlin_nb.neighbours import write_neighbours
    db, _ = hostile_db
    pages = {"neighbours": write_neighbours("Once upon a time, there was a little girl. She was happy.", tmp_path / "nb",
                                            run=reference_run(), db=db.path, layer=1, width=40, png=False, progress=False)["html"],
             "map": write_map(db, tmp_path / "map", n_top=40, layers=[0], n_epochs=5, png=False, progress=False)["html"]}
    neighbours_raw, neighbours_spec = _spec(pages["neighbours"].read_text())
    contexts = [r.get("context", "") for rows in neighbours_spec["datasets"].values() for r in rows]
    assert any(PAYLOAD in c for c in contexts), contexts[:3]  # the attack reached the page: the test can fail
    map_raw, map_spec = _spec(pages["map"].read_text())
    assert any("<" in r.get("token", "") for rows in map_spec["datasets"].values() for r in rows)
    driver = start_chromium(tmp_path / "profile")
    try:
        for name, page in pages.items():
            driver.get(page.as_uri())
            assert driver.execute_script("return document.images.length") == 0, name  # no <img> came out of the data
            assert driver.title != "owned", name
        for name, page in pages.items():  # their scripts are inline: each chart draws offline
            driver.get(page.as_uri())
            drawn = driver.execute_async_script("""const done = arguments[0];
                const t0 = Date.now(), poll = () => document.querySelector('#vis canvas, #vis svg, canvas, svg')
                    ? done(true) : Date.now() - t0 > 30000 ? done(false) : setTimeout(poll, 100); poll();""")
            assert drawn and driver.execute_script("return window.__pageErrors") == [], name
    finally:
        driver.quit()
    for raw in (neighbours_raw, map_raw):
        assert "<" not in raw and ">" not in raw  # written as \u003c and \u003e


def test_every_chart_is_saved_through_save_chart():
    "A new HTML writer cannot bypass the escaping: the package saves Altair charts only in `runs.save_chart`."
    calls = [f"{p.name}: {line.strip()}" for p in sorted((ROOT / "sgatlin_nb").glob("*.py"))
             for line in p.read_text().splitlines()
             if re.search(r"\.save\(", line) and not re.search(r"mgr\.save|tokenizer|\bsave\(tensors", line)]
    assert calls == ["runs.py: if fmt == 'html': chart.save(str(tmp), format='html', inline=inline, json_kwds={'cls': ScriptSafeJSON})",
                     "runs.py: else: chart.save(str(tmp), format='png', scale_factor=scale_factor)"], calls


# ---- nothing replaced or deleted unasked ----

def test_analyses_refuse_to_replace_files(hostile_db, tmp_path, capsys, monkeypatch):
    db, _ = hostile_db
    run = str(reference_run())
    monkeypatch.chdir(tmp_path)
    cases = {"neuron": (["neuron", "--run", run, "--db", str(db.path), "--layer", "1", "--channel", "0", "--neuron", "0",
                         "--out", "mine/run.json", "--quiet"], ["run.json"]),
             "usage": (["usage", "--run", run, "--out", "mine", "--n-stories", "4"], ["usage.csv"]),
             "neighbours": (["neighbours", "A cat.", "--run", run, "--db", str(db.path), "--out", "mine", "--quiet"],
                            ["neighbours.html"]),
             "patch": (["patch", "--run", run, "--out", "mine", "--nouns", "paper", "--n-boot", "10"], ["nie.csv"]),
             "map": (["map", "--db", str(db.path), "--out", "mine", "--n-epochs", "5", "--quiet"], ["points.csv"])}
    for name, (argv, files) in cases.items():
        shutil.rmtree("mine", ignore_errors=True)
        Path("mine").mkdir()
        for f in files: Path("mine", f).write_text(f"the user's own {f}\n")
        before = snapshot("mine")
        _refused(capsys, argv, f"mine/{files[0]} already exists", "--overwrite")
        assert snapshot("mine") == before, name
    # pages removes a leftover OUT.partial only when it began it (its mark is inside)
    Path("site.partial").mkdir()
    Path("site.partial", "notes.txt").write_text("not a site\n")
    _refused(capsys, ["pages", "--run", run, "--db", str(db.path), "--out", "site", "--per-layer", "1", "--quiet"],
             "site.partial exists and is not a site this command began")
    assert Path("site.partial", "notes.txt").read_text() == "not a site\n" and not Path("site").exists()


def test_submit_refused_by_sbatch_leaves_nothing(tmp_path, capsys, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho 'sbatch: error: invalid partition specified: gpu' >&2\nexit 1\n")
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    run_dir = tmp_path / "runs" / "iso"
    _refused(capsys, ["submit", str(ROOT / "nbs" / "07_scaling.ipynb"), "-p", "run_full=True", "--partition", "gpu",
                      "--run-dir", str(run_dir)], "sbatch refused", "invalid partition")
    assert not (tmp_path / "runs").exists()  # the folders it made, and only those, are gone


def test_submit_refuses_script_injection_in_directives(tmp_path, capsys, monkeypatch):
    "A line break (or a space) in --partition, --job-name or --account would become shell code in the sbatch script."
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\ntouch {tmp_path}/sbatch_called\necho 'Submitted batch job 7'\n")
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    marker = tmp_path / "injected"
    for option, value in [("--partition", f"gpu\ntouch {marker}"), ("--job-name", f"x\ntouch {marker}"),
                          ("--account", f"lab\n#SBATCH --time=UNLIMITED"), ("--partition", "gpu debug")]:
        for dry in ([], ["--dry-run"]):
            _refused(capsys, ["submit", str(ROOT / "nbs" / "07_scaling.ipynb"), "-p", "run_full=True", option, value,
                              "--out", str(tmp_path / "slurm"), *dry], f"{option} ", "written into the sbatch script")
    assert not (tmp_path / "sbatch_called").exists() and not marker.exists() and not (tmp_path / "slurm").exists()


# ---- one line for every bad input ----

def test_bad_configs(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("empty.yaml").write_text("")
    assert main(["config", "test-tiny"]) == 0
    full = capsys.readouterr().out
    Path("moe_key.yaml").write_text(full.replace("top_k: 2", "top_k: 3"))
    Path("missing.yaml").write_text(full.replace("steps: 30", "steps: ???"))
    Path("interp.yaml").write_text(full.replace("fsdp: false", "fsdp: ${steps}"))
    for argv, needles in [(["empty.yaml"], ["empty.yaml is empty", "sgatlin config PRESET >"]),
                          (["missing.yaml"], ["'steps' is '???'"]),
                          (["moe_key.yaml"], ["'model.ffw.top_k' = 3 is a setting of kind moe", "not of kind 'sgatlin'"]),
                          (["interp.yaml"], ["'fsdp' is '${steps}'", "interpolations are not read"]),
                          (["test-tiny", "steps=${batch_size}"], ["'steps' is '${batch_size}'"]),
                          (["test-tiny", "steps=???"], ["'steps' is '???'"]),
                          (["test-tiny", "model=3"], ["'model' is a section, not a value"]),
                          (["test-tiny", "model.ffw=[1,2]"], ["'model.ffw' is a section"])]:
        _refused(capsys, ["config", *argv], *needles)
    assert main(["config", "test-tiny", "model.ffw.kind=moe", "model.ffw.top_k=3"]) == 0  # a MoE key under kind moe
    assert "top_k: 3" in capsys.readouterr().out


def test_export_sample_runs_and_status_name_the_bad_file(tmp_path, capsys):
    run = reference_run()
    _refused(capsys, ["export", "--run", str(run), "--out", str(tmp_path / "x"), "--dtype", "bogus"], "--dtype takes float32")
    _refused(capsys, ["export", "--run", str(run), "--out", str(tmp_path / "x"), "--dtype", "float64"], "got 'float64'")
    assert not (tmp_path / "x").exists()
    edited = Path(shutil.copytree(run, tmp_path / "runs" / "edited"))
    meta = json.loads((edited / "config.json").read_text())
    del meta["model"]["d_model"]
    (edited / "config.json").write_text(json.dumps(meta))
    shutil.copytree(run, tmp_path / "runs" / "good")
    _refused(capsys, ["sample", "--run", str(edited)], f"{edited / 'config.json'}", "export the run again")
    assert main(["runs", "--root", str(tmp_path / "runs")]) == 0  # the good folder is listed, the edited one flagged
    out = capsys.readouterr().out
    assert re.search(r"runs/good +\S+ +sgatlin ", out) and re.search(r"runs/edited .*unreadable: ", out), out
    for text, needle in (("[]", "is not a submission `sgatlin submit` wrote"), ('{"notebook": "x.ip', "is not valid JSON")):
        d = tmp_path / f"sub{len(text)}"
        d.mkdir()
        (d / "submission.json").write_text(text)
        _refused(capsys, ["status", str(d)], f"{d / 'submission.json'}", needle)
    _refused(capsys, ["submit", str(ROOT / "nbs" / "07_scaling.ipynb"), "--dry-run", "--time", "00:05:00", "--signal-s", "300"],
             "--signal-s 300 must be shorter than --time 00:05:00")


def test_damaged_parquet_is_one_line_for_pages_and_neuron(hostile_db, tmp_path, capsys):
    db, _ = hostile_db
    damaged = Path(shutil.copytree(db.path, tmp_path / "db"))
    f = damaged / "gates_layer0.parquet"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    run = str(reference_run())
    _refused(capsys, ["neuron", "--run", run, "--db", str(damaged), "--layer", "1", "--channel", "0", "--neuron", "0",
                      "--out", str(tmp_path / "n.html"), "--quiet"], f"the circuit database {damaged} cannot be read",
             "sgatlin record")
    _refused(capsys, ["pages", "--run", run, "--db", str(damaged), "--out", str(tmp_path / "site"), "--quiet"],
             "cannot be read")
    assert not (tmp_path / "n.html").exists() and not (tmp_path / "site").exists() and not (tmp_path / "site.partial").exists()


def test_gate_indices_out_of_range_are_one_line_for_neuron(hostile_db, tmp_path, capsys):
    """A gates file whose neuron indices lie outside [0, d_ffw) (edited by hand or by another tool): one line, no page, for
    the page writers (DuckDB) and the readers of `CircuitDB.gates` alike."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    db, _ = hostile_db
    edited = Path(shutil.copytree(db.path, tmp_path / "db"))
    f = edited / "gates_layer0.parquet"
    t = pq.read_table(f)
    col = t.column("indices").combine_chunks()
    shifted = pa.FixedSizeListArray.from_arrays(pa.array(col.flatten().to_numpy() + db.d_ffw), col.type.list_size)
    pq.write_table(t.set_column(t.schema.get_field_index("indices"), "indices", shifted), f)
    _refused(capsys, ["neuron", "--run", str(reference_run()), "--db", str(edited), "--layer", "1", "--channel", "0",
                      "--neuron", "0", "--out", str(tmp_path / "n.html"), "--quiet"],
             f"{f} holds neuron indices from ", f"outside [0, {db.d_ffw})", "sgatlin record")
    _refused(capsys, ["neighbours", "The dog.", "--run", str(reference_run()), "--db", str(edited), "--layer", "1",
                      "--out", str(tmp_path / "nb")],
             f"{f} holds neuron indices from ", "sgatlin record")
    assert not (tmp_path / "n.html").exists() and not (tmp_path / "nb").exists()


def test_a_manifest_cut_short_is_one_line_for_every_reader(hostile_db, tmp_path, capsys):
    "A manifest.json without its recording or counts section (edited, or cut by hand): one line naming the field."
    db, _ = hostile_db
    run = str(reference_run())
    for section in ("recording", "counts"):
        cut = Path(shutil.copytree(db.path, tmp_path / section))
        manifest = json.loads((cut / "manifest.json").read_text())
        del manifest[section]
        (cut / "manifest.json").write_text(json.dumps(manifest))
        needle = f"{cut / 'manifest.json'} lacks {section}."
        _refused(capsys, ["neighbours", "The dog.", "--run", run, "--db", str(cut), "--out", str(tmp_path / "nb")], needle)
        _refused(capsys, ["map", "--db", str(cut), "--out", str(tmp_path / "map")], needle)
        _refused(capsys, ["neuron", "--run", run, "--db", str(cut), "--layer", "1", "--channel", "0", "--neuron", "0",
                          "--out", str(tmp_path / "n.html"), "--quiet"], needle)
        _refused(capsys, ["pages", "--run", run, "--db", str(cut), "--out", str(tmp_path / "site"), "--quiet"], needle)
    assert not [p.name for p in tmp_path.iterdir() if p.name not in ("recording", "counts")]

def test_a_checkpoint_rotated_out_while_read_is_not_damage(data_dir, tmp_path, monkeypatch):
    """`eval` reads the newest checkpoint while the trainer saves a newer one and removes it: the reader lists the
    checkpoints again and reads the newer one, instead of calling the removed one damaged."""
    import sgatlin_nb.runs as runs
    from sgatlin_nb.configs import PRESETS
    from sgatlin_nb.train import train
    monkeypatch.setenv("SGATLIN_DATA_DIR", str(data_dir))
    cfg = PRESETS["test-tiny"]
    train(dataclasses.replace(cfg, steps=20), "tinystories", tmp_path / "run", progress=False)
    real, calls = runs.read_params, []
    def rotating(run, step, params):  # the trainer, between the listing and the read: step 30 saved, step 20 removed
        if not calls:
            shutil.copytree(Path(run) / "checkpoints" / "20", Path(run) / "checkpoints" / "30")
            shutil.copy(Path(run) / "checksums" / "20.json", Path(run) / "checksums" / "30.json")
            shutil.rmtree(Path(run) / "checkpoints" / "20")
        calls.append(step)
        return real(run, step, params)
    monkeypatch.setattr(runs, "read_params", rotating)
    *_, at = runs.load_run(tmp_path / "run")
    assert (calls, at) == ([20, 30], 30)


def test_what_interrupted_runs_leave_behind(data_dir, tmp_path, capsys, monkeypatch):
    """A tokenizer.json left by a first start with other settings is made anew, not reused with a `set vocab_size` hint;
    a metrics line a killed run was writing is not damage, and a damaged one is named (file and line) by `sgatlin runs`."""
    from sgatlin_nb.runs import read_metrics
    from sgatlin_nb.data import train_tokenizer
    monkeypatch.setenv("SGATLIN_DATA_DIR", str(data_dir))
    out = tmp_path / "run"
    out.mkdir()
    texts = (data_dir / "tinystories" / "valid_head_1000.txt").read_text().split("<|endoftext|>")[:200]
    train_tokenizer(texts, vocab_size=512).save(str(out / "tokenizer.json"))  # as `tokenizer=train vocab_size=512` left it
    assert main(["train", "--config", "test-tiny", "--data", "tinystories", "--out", str(out), "--steps", "2", "--quiet"]) == 0
    assert len(json.loads((out / "tokenizer.json").read_text())["model"]["vocab"]) == 8192
    log = out / "metrics.jsonl"
    n = len(read_metrics(out))
    with open(log, "a") as f: f.write('{"step": 3, "lo')  # the line a killed run was writing
    assert len(read_metrics(out)) == n
    log.write_text('{"step": 1}\nnot json\n' + log.read_text())
    capsys.readouterr()
    assert main(["runs", "--root", str(tmp_path)]) == 0
    assert f"unreadable: {log} line 2 is not valid JSON" in capsys.readouterr().out


def test_runs_and_status_print_no_terminal_escapes(tmp_path, capsys):
    "A folder name or a job log cannot set the terminal's title, move its cursor or ring its bell: control characters print as `\\x1b`."
    from sgatlin_nb.slurm import _tail
    title = "\x1b]0;owned\x07"
    shutil.copytree(reference_run(), tmp_path / "runs" / f"a{title}b")
    assert main(["runs", "--root", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "a\\x1b]0;owned\\x07b" in out, out
    log = tmp_path / "task.log"
    log.write_bytes(f"step 1\nloss 3\x1b[31m.2\x1b[0m\n 10%\r100%\n{title}done\x9b2J\n".encode())
    assert _tail(log, 3) == "loss 3.2\n100%\n\\x1b]0;owned\\x07done\\x9b2J"


def test_sample_says_when_it_cuts_the_prompt_or_the_tokens(capsys):
    run = str(reference_run())
    _refused(capsys, ["sample", "--run", run, "--n-tokens", "0"], "--n-tokens must be at least 1, got 0")
    assert main(["sample", "--run", run, "--prompt", "Once upon a time " * 80, "--n-tokens", "3", "--temperature", "0"]) == 0
    err = capsys.readouterr().err
    assert "the prompt is 321 tokens and the model reads 256: it continues the last 255" in err, err
    assert "1 tokens fit after the prompt in the model's context of 256: it writes 1, not --n-tokens 3" in err, err


def test_pages_overwrite_never_deletes_a_users_files(tmp_path, capsys):
    "`pages --overwrite` replaces what a site build wrote, and refuses (deleting nothing) when the folder holds anything else."
    from sgatlin_nb.pages import _foreign_files
    site = tmp_path / "site"
    for f in ("index.html", "layer1.html", "neurons/L1_C0_N3.html", "circuits/r12.html", "graphs/0/graph.json"):
        (site / f).parent.mkdir(parents=True, exist_ok=True)
        (site / f).write_text("<html></html>")
    (site / "site.json").write_text(json.dumps({"neuron_pages": 1}))  # a site built before site.json listed its files
    assert _foreign_files(site) == []
    (site / "notes.md").write_text("mine")
    (site / "neurons" / "my.css").write_text("mine")
    before = snapshot(site)
    line = _refused(capsys, ["pages", "--out", str(site), "--overwrite"], f"{site / 'neurons/my.css'} and 1 more file(s)",
                    "did not come from a site build")
    assert snapshot(site) == before and not (tmp_path / "site.partial").exists(), line
    (site / "site.json").write_text(json.dumps({"files": ["index.html", "notes.md"]}))  # a site that lists its files
    assert _foreign_files(site) == ["circuits/r12.html", "graphs/0/graph.json", "layer1.html", "neurons/L1_C0_N3.html", "neurons/my.css"]


def test_a_submission_with_bad_job_entries_is_one_line(tmp_path, capsys):
    "Job entries of `submission.json` without their keys, or with a number for an id, end `sgatlin status` in one line."
    for i, job in enumerate([{"job": 987654321, "tasks": [0], "array": False}, {"tasks": [0]}, {"job": "12", "array": False},
                             {"job": "12", "tasks": [0], "array": False, "collect": 13}]):
        d = tmp_path / str(i)
        d.mkdir()
        (d / "submission.json").write_text(json.dumps({"notebook": "x.ipynb", "tasks": [{}], "jobs": [job]}))
        _refused(capsys, ["status", str(d)], f"{d / 'submission.json'}", "each job with its id as a string of digits")


def test_ctrl_c_is_one_line(tmp_path, capsys, monkeypatch):
    "Ctrl-C during `record` (or any command outside training's own handling) ends in one line and status 130, no traceback."
    import sgatlin_nb.record
    def interrupted(*args, **kwargs): raise KeyboardInterrupt
    monkeypatch.setattr(sgatlin_nb.record, "record_run", interrupted)
    assert main(["record", "--run", str(reference_run()), "--out", str(tmp_path / "db"), "--quiet"]) == 130
    err = capsys.readouterr().err
    assert err.splitlines() == ["sgatlin record: interrupted (Ctrl-C); what it was writing is left unfinished, and the same "
                                "command starts it again"], err


def test_resume_names_a_damaged_metrics_line_and_out_may_not_be_a_file(data_dir, tmp_path, capsys, monkeypatch):
    import dataclasses
    from sgatlin_nb.configs import PRESETS
    from sgatlin_nb.train import train
    monkeypatch.setenv("SGATLIN_DATA_DIR", str(data_dir))
    run = tmp_path / "run"
    train(dataclasses.replace(PRESETS["test-tiny"], steps=30), "tinystories", run, progress=False, stop_at=10)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join([lines[0], "not json", *lines[1:]]) + "\n")
    _refused(capsys, ["train", "--config", "test-tiny", "--out", str(run), "--steps", "30", "--resume", "--quiet"],
             f"{run / 'metrics.jsonl'} line 2 is not valid JSON")
    (tmp_path / "afile").write_text("mine")
    _refused(capsys, ["train", "--config", "test-tiny", "--out", str(tmp_path / "afile"), "--steps", "2", "--quiet"],
             f"--out {tmp_path / 'afile'} is a file, not a folder")
    assert (tmp_path / "afile").read_text() == "mine"


# ---- issue 66: what still gave a traceback ----

def test_a_task_file_without_items_or_choices_is_one_line(tmp_path, capsys, monkeypatch):
    "A task file of the data folder with an item lacking `choices`, an empty one, or a line of no JSON: one line naming file and line."
    tasks = tmp_path / "data" / "tasks"
    tasks.mkdir(parents=True)
    monkeypatch.setenv("SGATLIN_DATA_DIR", str(tmp_path / "data"))
    argv = ["eval", "--run", str(reference_run()), "--tasks", "zorro", "--limit", "4"]
    good = json.dumps({"id": 1, "context": "The dog", "choices": [" ran.", " run."], "gold": 0})
    for text, needle in ((good + "\n" + json.dumps({"id": 2, "context": "The cat", "gold": 0}) + "\n", "line 2 is not a task item"),
                         ("", "holds no items"), ("\n\n", "holds no items"), (good + "\n{cut\n", "line 2 is not valid JSON"),
                         (json.dumps({"context": "A", "choices": [" b."], "gold": 3}) + "\n", "line 1 is not a task item")):
        (tasks / "zorro.jsonl").write_text(text)
        _refused(capsys, argv, f"{tasks / 'zorro.jsonl'} ", needle)


def test_a_mirror_without_credentials_is_one_line(tmp_path, capsys, monkeypatch):
    "`--mirror s3://...` with no AWS credentials: one line naming the URL and what to set, before any file is written."
    # every AWS_ variable goes (a CI image may name a container or web-identity credential source), no files, no IMDS
    for name in [n for n in os.environ if n.startswith("AWS_")]: monkeypatch.delenv(name)
    for name in ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"): monkeypatch.setenv(name, str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    url = "s3://sgatlin-no-such-bucket/run"
    line = _refused(capsys, ["train", "--config", "test-tiny", "--steps", "2", "--out", str(tmp_path / "run"), "--mirror", url, "--quiet"],
                    f"the mirror {url} cannot be used (", "AWS_ACCESS_KEY_ID")
    # which botocore error comes first depends on the machine (no credentials; or, where some credential source still
    # answers, no route to S3 from a CI machine that reaches only package registries): either is named in the one line
    assert re.search(r"cannot be used \((NoCredentialsError: Unable to locate credentials|EndpointConnectionError: |"
                     r"ConnectTimeoutError: |ClientError: )", line), line
    assert not (tmp_path / "run").exists()


def test_two_records_on_one_out(tmp_path, capsys, monkeypatch):
    """While `record` writes a database, a second `record` on the same --out (a real process of its own) is refused in
    one line naming the first; the first then finishes, its database whole, and no lock file is left."""
    import subprocess
    import sys
    import sgatlin_nb.record as record
    from conftest import sgatlin_cmd
    db, seen = tmp_path / "db", []
    real = record._record_documents
    def with_a_second_writer(*args, **kwargs):  # the first writer holds --out: a second process tries the same
        res = subprocess.run(sgatlin_cmd() + ["record", "--run", str(reference_run()), "--out", str(db), "--n-docs", "4", "--quiet"],
                             capture_output=True, text=True, timeout=600, env={**os.environ, "JAX_PLATFORMS": "cpu"})
        seen.append((res.returncode, res.stderr.strip().splitlines()))
        return real(*args, **kwargs)
    monkeypatch.setattr(record, "_record_documents", with_a_second_writer)
    assert main(["record", "--run", str(reference_run()), "--out", str(db), "--n-docs", "4", "--quiet"]) == 0
    [(status, lines)] = seen
    assert status == 2 and len(lines) == 1 and lines[0].startswith(f"sgatlin record: error: out={db} is being written by "
                                                                   f"sgatlin record (pid {os.getpid()} on "), lines
    assert record.CircuitDB(db).manifest["counts"]["documents"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db"]  # no lock file, no partial folder


TRAIN2 = ["train", "--config", "test-tiny", "--steps", "2", "--quiet"]

@pytest.mark.parametrize("argv, needles", [
    (TRAIN2 + ["lr=１"], ["override lr=１", "U+FF11", "e.g. lr=1"]),  # a full-width digit, which Python reads as 1
    (TRAIN2 + ["--lr", "１"], ["--lr １: the number holds characters that are not ASCII"]),
    (TRAIN2 + ["--out", "a\nb"], ["--out '{tmp}/a\\nb' holds a control character"]),
    (TRAIN2 + ["--out", "a\x1b]0;owned\x07"], ["--out '{tmp}/a\\x1b]0;owned\\x07' holds a control character"]),
    (["submit", str(ROOT / "nbs" / "07_scaling.ipynb"), "-p", "results_path=a.json\nretrain_cpu=True", "--dry-run", "--out",
      "slurm"], ["-p 'results_path=a.json\\nretrain_cpu=True' holds a line break"]),
    (["neighbours", "", "--out", "nb", "--quiet"], ["the sentence is empty"]),
    (["neighbours", " \n ", "--out", "nb", "--quiet"], ["the sentence is empty"]),
], ids=["lr-override", "lr-option", "out-newline", "out-escape", "p-newline", "empty-sentence", "blank-sentence"])
def test_odd_characters_and_an_empty_sentence_are_one_line(tmp_path, capsys, argv, needles):
    "A full-width digit, a control character in a name or a -p value, an empty sentence: one line each, nothing written."
    argv = [str(tmp_path / a) if prev in ("--out",) else a for prev, a in zip([None] + argv, argv)]
    if "--out" not in argv: argv += ["--out", str(tmp_path / "r")]
    _refused(capsys, argv, *(n.format(tmp=tmp_path) for n in needles))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["neighbours", "The dog."], ["usage", "--run", str(reference_run())], ["graph", "The dog"]])
def test_an_out_that_is_a_file_is_named(tmp_path, capsys, command):
    "A file where a command writes its folder: one line saying so (it was a raw `[Errno 17] File exists`), the file kept."
    mine = tmp_path / "afile"
    mine.write_text("mine")
    _refused(capsys, [*command, "--out", str(mine)], f"--out {mine} is a file, not a folder")
    assert mine.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_neighbours_written_meanwhile_are_not_replaced(tmp_path, capsys, monkeypatch):
    "Files another query wrote into --out while this one computed are not replaced without --overwrite: one line, kept."
    import sgatlin_nb.neighbours as neighbours
    out, real = tmp_path / "nb", neighbours.neighbour_chart
    def another_query_meanwhile(*args, **kwargs):
        out.mkdir(exist_ok=True)
        (out / "neighbours.csv").write_text("the other query's")
        return real(*args, **kwargs)
    monkeypatch.setattr(neighbours, "neighbour_chart", another_query_meanwhile)
    _refused(capsys, ["neighbours", "The dog was happy.", "--out", str(out), "--quiet"], f"{out / 'neighbours.csv'} already exists")
    assert (out / "neighbours.csv").read_text() == "the other query's" and sorted(p.name for p in out.iterdir()) == ["neighbours.csv"]


@pytest.mark.parametrize("command", [["map", "--db", "{tmp}/db"], ["usage", "--run", str(reference_run())],
                                     ["patch", "--run", str(reference_run())], ["graph", "The dog", "--run", str(reference_run())],
                                     ["neighbours", "The dog.", "--quiet"], ["demo", "--reference", "--quiet"]],
                         ids=lambda c: c[0])
def test_a_writer_is_refused_while_another_writes_its_out(tmp_path, capsys, command):
    """map, usage, patch, graph, neighbours and demo took no lock: two on one --out both wrote it, each replacing the
    other's files. While another writer holds --out, each is now refused in one line naming it, and the folder stays as
    it was."""
    from sgatlin_nb.runs import writing_lock
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    before = snapshot(out)
    with writing_lock(out, "sgatlin map"):  # as a writer that runs holds it
        _refused(capsys, [c.format(tmp=tmp_path) for c in command] + ["--out", str(out)],
                 f"out={out} is being written by sgatlin map (pid {os.getpid()} on ", "wait for it to finish")
    assert snapshot(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_two_graphs_on_one_out(tmp_path, capsys, monkeypatch):
    """While `graph` writes its --out, a second `graph` on it (a real process of its own) is refused in one line naming
    the first; the first then writes its graph, and no lock file is left."""
    import subprocess
    import sys
    import sgatlin_nb.graph as graph
    from conftest import sgatlin_cmd
    out, seen, real = tmp_path / "g", [], graph.attribution_graph
    def with_a_second_writer(*args, **kwargs):  # the first writer holds --out: a second process tries the same
        res = subprocess.run(sgatlin_cmd() + ["graph", "The dog", "--run", str(reference_run()), "--out", str(out)],
                             capture_output=True, text=True, timeout=600, env={**os.environ, "JAX_PLATFORMS": "cpu"})
        seen.append((res.returncode, res.stderr.strip().splitlines()))
        return real(*args, **kwargs)
    monkeypatch.setattr(graph, "attribution_graph", with_a_second_writer)
    assert main(["graph", "The dog", "--run", str(reference_run()), "--out", str(out)]) == 0
    [(status, lines)] = seen
    assert status == 2 and len(lines) == 1 and lines[0].startswith(f"sgatlin graph: error: out={out} is being written by "
                                                                   f"sgatlin graph (pid {os.getpid()} on "), lines
    assert sorted(p.name for p in out.iterdir()) == ["graph.html", "graph.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g"]  # no lock file left


@pytest.mark.parametrize("command", [["pages"], ["record", "--run", str(reference_run()), "--n-docs", "2"]], ids=lambda c: c[0])
def test_an_out_that_is_the_current_folder_is_one_line(tmp_path, capsys, monkeypatch, command):
    """`pages --out .` gave a raw "Path('.') has an empty name" and `record --out .` a raw "[Errno 22] Invalid argument":
    each builds a folder beside --out and renames it into place. Now one line, for . and for a folder above the current
    one, and nothing is written."""
    here = tmp_path / "site"
    here.mkdir()
    monkeypatch.chdir(here)
    for out, needle in ((".", "out=. is the current folder: "), ("..", "out=.. is the current folder or one above it: ")):
        _refused(capsys, [*command, "--out", out, "--quiet"], needle, "name a folder of its own, e.g. --out ")
    assert list(tmp_path.rglob("*")) == [here]


def test_a_notebook_without_a_kernelspec_is_submitted(tmp_path, capsys):
    """A notebook that names no kernel stopped `submit` at papermill's "No kernel name found in notebook and no override
    provided": its job runs it with a kernel named anyway (the package's `sgatlin_nb` where installed, else python3,
    `papermill_kernel`), so it is read that way (with the language papermill then needs too). A file that is no notebook is one line naming it."""
    import nbformat
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["parameters"]}), nbformat.v4.new_code_cell("print(x)")]
    path = tmp_path / "bare.ipynb"
    nbformat.write(nb, path)
    assert "kernelspec" not in json.loads(path.read_text())["metadata"]
    argv = ["submit", str(path), "--dry-run", "--out", str(tmp_path / "slurm")]
    assert main(argv + ["-p", "x=2"]) == 0
    assert '--kernel "$SGATLIN_KERNEL" --language python ' in capsys.readouterr().out  # the job's kernel: sgatlin_nb, else python3
    _refused(capsys, argv + ["-p", "y=2"], "bare.ipynb has no parameter y; its parameters are x")
    (tmp_path / "cut.ipynb").write_text('{"cells": [')
    _refused(capsys, ["submit", str(tmp_path / "cut.ipynb"), "--dry-run"], f"{tmp_path / 'cut.ipynb'} cannot be read as a notebook")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bare.ipynb", "cut.ipynb"]


def test_export_while_another_writes_its_out_or_into_the_current_folder(tmp_path, capsys, monkeypatch):
    """`export` took no lock (two on one --out raced to rename their folders into place), and `--out .` said ". is not
    empty" of an empty folder (its own temporary folder was being made inside it). Both are one line now, nothing written."""
    from sgatlin_nb.runs import writing_lock
    out = tmp_path / "export"
    with writing_lock(out, "sgatlin export"):  # as an export that runs holds it
        _refused(capsys, ["export", "--run", str(reference_run()), "--out", str(out)],
                 f"out={out} is being written by sgatlin export (pid {os.getpid()} on ")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.chdir(tmp_path)
    _refused(capsys, ["export", "--run", str(reference_run()), "--out", "."], "out=. is the current folder: ", "e.g. --out export")
    assert list(tmp_path.iterdir()) == []


def test_two_submits_into_one_run_folder(tmp_path, capsys, monkeypatch):
    """Two `submit --run-dir R` at once both wrote R's scripts and submission.json (the last one's record kept, the other
    job forgotten). While one submits (a real process, its sbatch slow), the other is refused in one line naming it; the
    first then records its job, and no lock file is left."""
    import subprocess
    import time
    import nbformat
    from conftest import sgatlin_cmd
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["parameters"]})]
    nbformat.write(nb, tmp_path / "job.ipynb")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "sbatch").write_text("#!/bin/sh\nsleep 3\necho 4242\n")
    (tmp_path / "bin" / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    run_dir, lock = tmp_path / "slurm" / "r", tmp_path / "slurm" / ".r.lock"
    argv = ["submit", str(tmp_path / "job.ipynb"), "-p", "x=2", "--run-dir", str(run_dir)]
    first = subprocess.Popen(sgatlin_cmd() + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "JAX_PLATFORMS": "cpu"})
    try:
        deadline = time.time() + 120
        while not lock.exists() and first.poll() is None and time.time() < deadline: time.sleep(0.05)
        assert first.poll() is None and lock.exists(), first.poll()
        _refused(capsys, argv, f"out={run_dir} is being written by sgatlin submit (pid {first.pid} on ")
        out, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None: first.kill()
    assert first.returncode == 0 and "submitted job 4242" in out, err[-2000:]
    assert [j["job"] for j in json.loads((run_dir / "submission.json").read_text())["jobs"]] == ["4242"]
    assert sorted(p.name for p in (tmp_path / "slurm").iterdir()) == ["r"]
