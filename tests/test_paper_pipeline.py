"""Every paper page's `sgatlin submit` line, run with `-p miniature=True` on the local Slurm: the same jobs, arrays,
merges and figures as the paper-size run, shrunk to a CPU. All pages are submitted at once, then waited for."""
import ast
import copy
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


# Each page's paper line with the miniature switch. nbdev-test runs every page whole, so here each task runs the page's
# lean copy (`--lean-tasks all`: its code, imports, parameters and heavy cells); 07's first task too, where the paper
# line runs the whole page (test_slurm's test_sbatch_text checks that the script gives its first task the page).
LEAN = " --lean-tasks all"
# 08's single task trains six ablations in a row, the longest task: submitted first, it does not run last alone
LINES = {
    "08_ablations": page_line("08_ablations.ipynb") + " -p miniature=True" + LEAN,
    "06_train": page_line("06_train.ipynb") + " -p miniature=True" + LEAN,
    "07_scaling": paper_line(miniature=True) + LEAN,
    "08a_tasks": page_line("08a_tasks.ipynb") + " -p miniature=True" + LEAN,
    "13_intervention": page_line("13_intervention.ipynb") + " -p miniature=True" + LEAN,
    "14_usage": page_line("14_usage.ipynb") + " -p miniature=True" + LEAN,
    "92_gpu": SUBMIT_LINE + " -p miniature=True" + LEAN,
}


@pytest.fixture(scope="module")
def miniature_runs(slurm, tmp_path_factory, data_dir, shared_cache):
    "Submit every page's miniature line at once, wait for all; the run folder of each page."
    tmp = tmp_path_factory.mktemp("paper")
    env = {**os.environ, "SGATLIN_DATA_DIR": str(data_dir), "JAX_PLATFORMS": "cpu", "SGATLIN_CACHE": str(shared_cache),
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


def spec_rows(html_path: Path) -> list[dict]:
    "Every data row of the Vega-Lite chart saved in `html_path` (the rows it draws from)."
    spec = json.loads(re.search(r"(?:var|const) spec = (\{.*?\});\n", html_path.read_text(), re.S)[1])
    return [row for rows in spec.get("datasets", {}).values() for row in rows]


def broken(check, *args):
    "Each check must fail on a deliberately broken copy of what it reads: `check(*args)` raises AssertionError."
    with pytest.raises(AssertionError):
        check(*args)


# Each page's check compares what the page drew or printed with the numbers it was drawn from, then runs again on a
# copy broken on purpose, which it must refuse.

def check_07(merged: dict, isoflop: list[dict], sparsity: list[dict]):
    "Figure 3 draws every main run's perplexity, figure 1 each variant's best per budget, with parameters per FLOP."
    main = {}
    for part in merged["parts"]:
        proto = part["protocol"]
        for r in part["runs"]:
            if (r["seed"] == 0 and r["activation"] is None and r["router"] == "product_dense"
                    and r["lr"] == proto["recipe"]["lr"]):
                main[r["key"]] = {**r, "params_per_flop": r["params"] / r[f"flops_{proto['accounting']}"]}
    assert {r["key"]: r["eval_ppl"] for r in isoflop} == {k: r["eval_ppl"] for k, r in main.items()}
    best = {}
    for r in main.values():
        b = best.get((r["budget"], r["variant"]))
        if b is None or r["eval_ppl"] < b["eval_ppl"]: best[(r["budget"], r["variant"])] = r
    assert sorted(r["key"] for r in sparsity) == sorted(r["key"] for r in best.values())
    for row in sparsity:
        want = main[row["key"]]
        assert row["eval_ppl"] == want["eval_ppl"] and math.isclose(row["params_per_flop"], want["params_per_flop"]), row


def test_07_array_merge_and_figures(miniature_runs):
    run_dir = miniature_runs["07_scaling"]
    grid = paper_grid(MINI_CORPUS, miniature=True)
    assert sorted(p.name for p in run_dir.iterdir() if p.name.isdigit()) == sorted(str(i) for i in range(len(grid)))
    merged = json.loads((run_dir / "results.json").read_text())
    assert merged["missing"] == []
    # --lean-tasks all: every task ran the same lean copy (its code, parameters and sweep cell only)
    cells = [len(nbformat.read(run_dir / str(i) / "executed-0.ipynb", as_version=4).cells) for i in range(len(grid))]
    assert len(set(cells)) == 1, cells
    budgets = [part["runs"][0]["budget"] for part in merged["parts"]]
    assert sorted(budgets) == sorted(MINI_GRID)  # one part per budget: each has its own batch and context
    runs = [r for part in merged["parts"] for r in part["runs"]]
    assert sorted(r["key"] for r in runs) == sorted(p.key for p in grid)
    assert all(r["error"] is None and math.isfinite(r["eval_ppl"]) for r in runs), runs
    figs = {fig: spec_rows(run_dir / f"results-{MINI_CORPUS}-{fig}.html") for fig in ("isoflop", "sparsity")}
    for fig, rows in figs.items():  # figures 3 and 1, drawn by the collect job from the merged file
        assert {row["variant"] for row in rows} == set(LADDER_KINDS), (fig, rows)
    check_07(merged, figs["isoflop"], figs["sparsity"])
    bad = copy.deepcopy(figs["isoflop"]); bad[0]["eval_ppl"] *= 1.01
    broken(check_07, merged, bad, figs["sparsity"])
    other = {"paper": "full", "full": "paper"}[merged["parts"][0]["protocol"]["accounting"]]  # figure 1 in the other accounting
    bad = [{**r, "params_per_flop": r["params"] / r[f"flops_{other}"]} for r in figs["sparsity"]]
    broken(check_07, merged, figs["isoflop"], bad)
    broken(check_07, merged, figs["isoflop"], figs["sparsity"][1:])  # a best point not drawn


def check_06(printed: str, metrics: list[dict]):
    "06 prints the final held-out evaluation of the run it trained, and its perplexity is exp of its loss."
    ev = [m for m in metrics if "eval_loss" in m][-1]
    shown = float(re.search(r"held-out perplexity ([\d.]+); unigram", printed)[1])
    assert shown == round(ev["eval_ppl"], 1) and math.isclose(ev["eval_ppl"], math.exp(ev["eval_loss"]), rel_tol=1e-9)
    assert math.isfinite(ev["eval_ppl_batches"])  # the authors' definition of test perplexity is logged too
    assert all(0 < f <= 1 for f in ev["usage_fraction"]) and all(0 <= h <= 1 for h in ev["usage_entropy"])


def test_06_paper_preset_trained_and_evaluated(miniature_runs, shared_cache):
    out = executed(miniature_runs["06_train"])
    runs = [p for p in shared_cache.iterdir() if p.is_dir()]
    run = next(p for p in runs if p.name.startswith("tinystories-miniature"))
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    check_06(out, metrics)
    broken(check_06, out.replace("held-out perplexity ", "held-out perplexity 1"), metrics)


ABLATION_ROWS = {"+ ReLU activation": ("relu", "product_dense", 0), "+ GeLU activation": ("gelu", "product_dense", 0),
                 "+ Swish activation": ("swish", "product_dense", 0), "↔ PEER router": (None, "product_key_value", 0),
                 "∅ sgatlin, seed 1": (None, "product_dense", 1), "∅ sgatlin": (None, "product_dense", 0)}


def check_08(table: pd.DataFrame, results: dict):
    """Table 1 holds each ablation's own run: its perplexity, and its change against sgatlin recomputed from the runs;
    every ablation took effect (its config says so; six different perplexities; the PEER router, dearer per token, gets
    fewer steps at the same budget)."""
    runs = {(r["activation"], r["router"], r["seed"]): r for r in results["runs"]}
    assert len(table) == len(ABLATION_ROWS) == len(runs)
    base = runs[(None, "product_dense", 0)]
    for name, key in ABLATION_ROWS.items():
        r = runs[key]
        assert table.loc[name, "held-out perplexity"] == r["eval_ppl"], name
        assert math.isclose(table.loc[name, "vs sgatlin"], r["eval_ppl"] / base["eval_ppl"] - 1, abs_tol=1e-12), name
        ffw = r["config"]["model"]["ffw"]
        assert (ffw["activation"], ffw["router"], r["config"]["seed"]) == key, (name, ffw)
        if key[1] == "product_key_value": assert r["steps"] < base["steps"], (r["steps"], base["steps"])
        else: assert r["steps"] == base["steps"], name
    assert table["held-out perplexity"].nunique() == len(table), table


def test_08_ablation_table(miniature_runs):
    task = miniature_runs["08_ablations"] / "0"
    table = pd.read_csv(task / "ablations.csv", index_col=0)
    results = json.loads((task / "ablations.json").read_text())
    check_08(table, results)
    bad = table.copy(); bad.loc["+ ReLU activation", "held-out perplexity"] = bad.loc["∅ sgatlin", "held-out perplexity"]
    broken(check_08, bad, results)
    bad = copy.deepcopy(results)
    for r in bad["runs"]:
        if r["router"] == "product_key_value": r["config"]["model"]["ffw"]["router"] = "product_dense"  # the ablation did not apply
    broken(check_08, table, bad)


def check_08a(got: dict, want: dict):
    "The job's scores: the page's sample tasks, 20 items each, every item's nats and correctness as `score_tasks` gives them here."
    assert list(got["tasks"]) == ["lambada", "hellaswag", "zorro"], list(got["tasks"])
    for n, r in got["tasks"].items():
        w = want["tasks"][n]
        assert r["items"] == w["items"] == 20 and r["acc"] == w["acc"], (n, r["items"], r["acc"], w["acc"])
        assert r["per_item"]["correct"] == w["per_item"]["correct"], n
        assert max(abs(a - b) for a, b in zip(r["per_item"]["nats"], w["per_item"]["nats"])) <= 1e-5, n


def test_08a_task_scores(miniature_runs):
    from sgatlin_nb.reference import REFERENCE_DIR
    from sgatlin_nb.tasks import score_tasks
    got = json.loads((miniature_runs["08a_tasks"] / "0" / "tasks.json").read_text())
    want = score_tasks(REFERENCE_DIR, ["lambada", "hellaswag", "zorro"], limit=20, progress=False)
    check_08a(got, want)
    bad = copy.deepcopy(got); bad["tasks"]["zorro"]["per_item"]["nats"][3] += 1e-3
    broken(check_08a, bad, want)


def check_13(pairs: pd.DataFrame, per_pair: pd.DataFrame, nie: pd.DataFrame, drawn: list[dict]):
    """The patching grid: every ordered pair of the nouns, exact zeros where a patch cannot act (positions before the
    noun; the last layer at the noun, which attention cannot carry to the last token), the table's means recomputed from
    the per-pair effects, and the figure's bars and cells equal to the table."""
    P = len(pairs)
    assert len(per_pair) == P * (P - 1) and (nie.n_pairs == P * (P - 1)).all(), (P, len(per_pair))
    assert (nie.n_known == per_pair.known.sum()).all()
    none_known = not per_pair.known.any()  # a miniature model may know no pair: the mean over known pairs is then undefined (NaN)
    unset = lambda v: v is None or (isinstance(v, float) and math.isnan(v))
    layers = [l for l in nie.layer.unique() if l.startswith("layer ")]
    order = list(dict.fromkeys(nie.position))  # the prompt's positions in order, then "all positions"
    for row in nie.itertuples():
        col = per_pair[f"nie[{row.layer}|{row.position}]"]
        before = order.index(row.position) < order.index("[noun]")
        cannot = before or (row.layer == layers[-1] and row.position == "[noun]")
        if cannot:
            assert (col == 0).all() and row.nie_all == 0, row
            assert all(map(unset, (row.nie, row.lo, row.hi))) if none_known else row.nie == row.lo == row.hi == 0, row
        assert math.isclose(row.nie_all, col.mean(), rel_tol=1e-5, abs_tol=1e-6), row
        assert unset(row.nie) if none_known else math.isclose(row.nie, col[per_pair.known].mean(), rel_tol=1e-5, abs_tol=1e-6), row
    cells = {(r["layer"], r["position"]): r for r in drawn if "nie_all" in r}
    bars = [r for r in drawn if "value" in r]
    table = {(r.layer, r.position): r for r in nie.itertuples()}
    assert len(cells) == len(nie) and len(bars) >= len(layers)
    for row in nie.itertuples():
        c = cells[(row.layer, row.position)]
        assert (unset(c["nie"]) if none_known else math.isclose(c["nie"], row.nie, abs_tol=1e-9)), (c, row)
        assert math.isclose(c["nie_all"], row.nie_all, abs_tol=1e-9), row
    for b in bars:
        row = table[(b["layer"], b["position"].removesuffix(" (last)"))]  # the bars mark the last position so
        assert math.isclose(b["value"], row.nie_all, abs_tol=1e-9) and math.isclose(b["low"], row.lo_all, abs_tol=1e-9), b


def test_13_nie_figure(miniature_runs):
    out = miniature_runs["13_intervention"] / "0" / "intervention_tinystories-miniature"
    assert (out / "nie.png").stat().st_size > 10_000
    parts = (pd.read_csv(out / "pairs.csv"), pd.read_csv(out / "per_pair.csv"), pd.read_csv(out / "nie.csv"),
             spec_rows(out / "nie.html"))
    assert {"layer 1", "layer 2"} <= set(parts[2].layer) and parts[2].n_known.notna().all(), parts[2]
    assert len(parts[0]) == 8 and len(parts[1]) == 56  # the paper's 8 nouns: 56 ordered pairs
    check_13(*parts)
    bad = parts[1].copy(); bad.iloc[0, bad.columns.get_loc("nie[layer 1|The]")] = 1e-3  # an effect before the noun
    broken(check_13, parts[0], bad, parts[2], parts[3])
    bad = copy.deepcopy(parts[3]); next(r for r in bad if "nie_all" in r and r["nie_all"])["nie_all"] += 0.01
    broken(check_13, parts[0], parts[1], parts[2], bad)


def check_14(usage: pd.DataFrame, summary: dict, drawn: list[dict]):
    "The usage figure draws the usage table's rows, and the summary is the table's means."
    rows = [r for r in drawn if "fraction used" in r]
    assert len(rows) == len(usage)
    for r, (_, u) in zip(sorted(rows, key=lambda r: (r["layer"], r["channel"])), usage.sort_values(["layer", "channel"]).iterrows()):
        assert (r["layer"], r["channel"]) == (u["layer"], u["channel"]) and math.isclose(r["fraction used"], u["fraction used"]) \
            and math.isclose(r["gini"], u["gini"]), (r, dict(u))
    for key in ("fraction used", "gini", "gini (distinct tokens)"):
        assert math.isclose(summary[key], usage[key].mean(), rel_tol=1e-9), key
    assert ((usage["fraction used"] > 0) & (usage["fraction used"] <= 1)).all(), usage


def test_14_usage_figure(miniature_runs):
    out = miniature_runs["14_usage"] / "0" / "usage_tinystories-miniature"
    assert (out / "usage.png").stat().st_size > 10_000
    usage, summary = pd.read_csv(out / "usage.csv"), json.loads((out / "summary.json").read_text())
    drawn = spec_rows(out / "usage.html")
    check_14(usage, summary, drawn)
    broken(check_14, usage, {**summary, "gini": summary["gini"] + 0.01}, drawn)
    bad = copy.deepcopy(drawn); next(r for r in bad if "fraction used" in r)["fraction used"] /= 2
    broken(check_14, usage, summary, bad)


def check_92(printed: str):
    "The printed ratio is the ratio of the two printed step times (to their rounding)."
    ms = dict(re.findall(r"^(sgatlin|swiglu): ([\d.]+) ms/step", printed, re.M))
    ratio = float(re.search(r"step time sgatlin / SwiGLU at equal FLOPs: (\d+\.\d+)", printed)[1])
    assert set(ms) == {"sgatlin", "swiglu"}, printed[-2000:]
    assert abs(ratio - float(ms["sgatlin"]) / float(ms["swiglu"])) <= 0.006 + 0.05 * (1 + ratio) / float(ms["swiglu"]), (ratio, ms)


def test_92_timing_table(miniature_runs):
    out = executed(miniature_runs["92_gpu"])
    check_92(out)
    broken(check_92, re.sub(r"(step time sgatlin / SwiGLU at equal FLOPs: )(\d+\.\d+)", lambda m: m[1] + f"{float(m[2]) * 2:.2f}", out))


def test_the_lean_pages_ran_lean(miniature_runs):
    "The pages submitted with `--lean-tasks all` ran their lean copy in task 0: fewer cells, no documentation."
    for page, line in LINES.items():
        nb = nbformat.read(miniature_runs[page] / "0" / "executed-0.ipynb", as_version=4)
        nb.cells = [c for c in nb.cells if "injected-parameters" not in c.metadata.get("tags", [])]  # papermill's own
        whole = nbformat.read(NBS / f"{page}.ipynb", as_version=4)
        assert LEAN in line, line
        assert all(c.cell_type == "code" for c in nb.cells) and len(nb.cells) < len(whole.cells) / 2, (page, len(nb.cells))
