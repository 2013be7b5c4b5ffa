"""Every paper page's `sgatlin submit` line, run with `-p miniature=True` on the local Slurm: the same jobs, arrays,
merges and figures as the paper-size run, shrunk to a CPU. All pages are submitted at once, then waited for."""
import ast
import json
import math
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from conftest import ROOT, sgatlin_cmd
from sgatlin_nb.gpu import SUBMIT_LINE
from sgatlin_nb.scaling import LADDER_KINDS, MINI_CORPUS, MINI_GRID, paper_grid, paper_line
from sgatlin_nb.slurm import wait_run

NBS = ROOT / "nbs"
CPU = ["--gpus-per-node", "0", "--cpus-per-task", "1", "--time", "00:40:00"]  # what a CPU node asks for instead


def page_line(page: str) -> str:
    "The `PAPER_LINE = (...)` a page prints, read from the notebook itself."
    nb = nbformat.read(NBS / page, as_version=4)
    src = next(c.source for c in nb.cells if c.cell_type == "code" and c.source.startswith("PAPER_LINE = ("))
    return ast.literal_eval(src[len("PAPER_LINE = "):src.index("\nprint(")])


LINES = {  # page: its paper line with the miniature switch
    "06_train": page_line("06_train.ipynb") + " -p miniature=True",
    "07_scaling": paper_line(miniature=True),
    "08_ablations": page_line("08_ablations.ipynb") + " -p miniature=True",
    "13_intervention": page_line("13_intervention.ipynb") + " -p miniature=True",
    "14_usage": page_line("14_usage.ipynb") + " -p miniature=True",
    "92_gpu": SUBMIT_LINE + " -p miniature=True",
}


@pytest.fixture(scope="module")
def miniature_runs(slurm, tmp_path_factory, data_dir):
    "Submit every page's miniature line at once, wait for all; the run folder of each page."
    tmp = tmp_path_factory.mktemp("paper")
    env = {**os.environ, "SGATLIN_DATA_DIR": str(data_dir), "JAX_PLATFORMS": "cpu", "SGATLIN_CACHE": str(tmp / "cache"),
           "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    runs, started = {}, time.time()
    for page, line in LINES.items():
        argv = shlex.split(line)
        assert argv[:2] == ["sgatlin", "submit"] and "run_full=True" in argv, line
        res = subprocess.run(sgatlin_cmd() + argv[1:] + CPU + ["--run-dir", str(tmp / page)], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, f"{line}\n{res.stdout}\n{res.stderr}"
        runs[page] = tmp / page
    times = {}
    for page, run_dir in runs.items():
        wait_run(run_dir, poll_s=2, timeout_s=2400, log=print)  # raises, with each failed task's log tail, if any failed
        times[page] = time.time() - started
    print("miniature jobs done, seconds after submission:", {p: round(s) for p, s in times.items()})
    return runs


def executed(run_dir: Path, task: int = 0) -> str:
    "The text outputs of a task's executed notebook."
    nb = nbformat.read(run_dir / str(task) / "executed-0.ipynb", as_version=4)
    return "\n".join(o.get("text", "") if o.get("output_type") == "stream" else "".join(o.get("data", {}).get("text/plain", ""))
                     for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


def test_07_array_merge_and_figures(miniature_runs):
    run_dir = miniature_runs["07_scaling"]
    grid = paper_grid(MINI_CORPUS, miniature=True)
    assert sorted(p.name for p in run_dir.iterdir() if p.name.isdigit()) == sorted(str(i) for i in range(len(grid)))
    merged = json.loads((run_dir / "results.json").read_text())
    assert merged["missing"] == []
    budgets = [part["runs"][0]["budget"] for part in merged["parts"]]
    assert sorted(budgets) == sorted(MINI_GRID)  # one part per budget: each has its own batch and context
    runs = [r for part in merged["parts"] for r in part["runs"]]
    assert sorted(r["key"] for r in runs) == sorted(p.key for p in grid)
    assert all(r["error"] is None and math.isfinite(r["eval_ppl"]) for r in runs), runs
    for fig in ("isoflop", "sparsity"):  # figures 3 and 1, drawn by the collect job from the merged file
        html = (run_dir / f"results-{MINI_CORPUS}-{fig}.html").read_text()
        spec = json.loads(re.search(r"(?:var|const) spec = (\{.*?\});\n", html, re.S)[1])  # inline or not
        drawn = {row["variant"] for rows in spec["datasets"].values() for row in rows}
        assert drawn == set(LADDER_KINDS), (fig, drawn)


def test_06_paper_preset_trained_and_evaluated(miniature_runs):
    out = executed(miniature_runs["06_train"])
    ppl = re.search(r"held-out perplexity ([\d.]+); unigram", out)
    assert ppl and math.isfinite(float(ppl[1])), out[-2000:]


def test_08_ablation_table(miniature_runs):
    table = pd.read_csv(miniature_runs["08_ablations"] / "0" / "ablations.csv", index_col=0)
    assert len(table) == 6 and table["held-out perplexity"].notna().all(), table
    assert table.loc["∅ sgatlin", "vs sgatlin"] == 0


def test_13_nie_figure(miniature_runs):
    out = miniature_runs["13_intervention"] / "0" / "intervention_tinystories-miniature"
    assert (out / "nie.png").stat().st_size > 10_000
    nie = pd.read_csv(out / "nie.csv")
    assert {"layer 1", "layer 2"} <= set(nie.layer) and nie.n_known.notna().all(), nie


def test_14_usage_figure(miniature_runs):
    out = miniature_runs["14_usage"] / "0" / "usage_tinystories-miniature"
    assert (out / "usage.png").stat().st_size > 10_000
    usage = pd.read_csv(out / "usage.csv")
    assert ((usage["fraction used"] > 0) & (usage["fraction used"] <= 1)).all(), usage


def test_92_timing_table(miniature_runs):
    out = executed(miniature_runs["92_gpu"])
    assert re.search(r"step time sgatlin / SwiGLU at equal FLOPs: \d+\.\d+", out), out[-2000:]
