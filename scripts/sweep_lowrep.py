"""Issue 70's CPU runs, resumable: stop it any time (Ctrl-C, kill) and start it again; finished runs are skipped.

Stages, in order (each its own results file under nbs/results, merged and guarded on 07):
  halfrung  the sample's rung 1.5 at 1.6e12 and 3.2e12, every kind (seed 0), where the optima were bracketed only
            by rungs 0.5 and 2                                                     -> isoflop_cpu_halfrung.json
  lowrep    the 2.2x corpus of the repetition control at 3.2e12 and 6.4e12: MLP, sgatlin and MoE at rungs 1, 1.5, 2
            (seed 0), then seeds 1-9 at each kind's seed-0 optimum, seed by seed -> isoflop_cpu_lowrep.json
  retrain   on the sample at 1.6e12 and 3.2e12 with today's code: rungs 1 and 2 of every kind again (seed 0), then
            seeds 1 and 2 at each kind's optimum                                   -> isoflop_cpu_halfrung.json

    python scripts/sweep_lowrep.py [--stages halfrung,lowrep,retrain] [--work DIR] [--dry-run]
"""
import argparse
import os
from pathlib import Path

from sgatlin_nb.reference import reference_stories, write_stories
from sgatlin_nb.scaling import (CPU_PROTOCOL, LADDER_KINDS, REPETITION_CORPUS, REPETITION_PROTOCOL, Point, read_results,
                                run_sweep)

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = 'tinystories'
HALFRUNG_BUDGETS, LOWREP_BUDGETS, LOWREP_KINDS = (1.6e12, 3.2e12), (3.2e12, 6.4e12), ('mlp', 'sgatlin', 'moe')


def seed0_optimum(path: Path, corpus: str, budget: float, kind: str, rungs) -> float | None:
    "The rung of lowest held-out perplexity among `rungs` at seed 0 (None until every one of them has run)."
    runs = read_results(path)['runs'] if path.exists() else []
    ppl = {r['scale']: r['eval_ppl'] for r in runs if r['corpus'] == corpus and r['budget'] == budget
           and r['variant'] == kind and r['seed'] == 0 and r['scale'] in rungs and r['eval_ppl'] is not None}
    return min(ppl, key=ppl.get) if len(ppl) == len(rungs) else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--stages', default='halfrung,lowrep,retrain')
    ap.add_argument('--work', default=str(ROOT / 'runs' / 'issue70'), help='run folders and the corpus (kept: resumes)')
    ap.add_argument('--seeds', type=int, default=10, help='seeds at each low-repetition optimum (0 included)')
    ap.add_argument('--dry-run', action='store_true', help='print the points of each stage and train nothing')
    a = ap.parse_args()
    results = ROOT / 'nbs' / 'results'
    halfrung, lowrep = results / 'isoflop_cpu_halfrung.json', results / 'isoflop_cpu_lowrep.json'
    work = Path(a.work).resolve()
    work.mkdir(parents=True, exist_ok=True)

    def sweep(points, protocol, path):
        if a.dry_run:
            print(f"{path.name}: {len(points)} points"); [print('  ', p.key) for p in points]; return
        run_sweep(points, protocol, path, work_dir=work / 'runs', keep_runs=False)

    for stage in a.stages.split(','):
        if stage == 'halfrung':
            sweep([Point(SAMPLE, b, v, 1.5) for b in HALFRUNG_BUDGETS for v in LADDER_KINDS], CPU_PROTOCOL, halfrung)
        elif stage == 'lowrep':
            write_stories(reference_stories()[0], work / REPETITION_CORPUS)
            here = os.getcwd(); os.chdir(work)  # the corpus is named relative to the run folders, as on 07
            try:
                rungs = (1, 1.5, 2)
                sweep([Point(REPETITION_CORPUS, b, v, s) for b in LOWREP_BUDGETS for v in LOWREP_KINDS for s in rungs],
                      REPETITION_PROTOCOL, lowrep)
                for sd in range(1, a.seeds):  # seed by seed, so that a stopped sweep leaves whole pairs
                    pts = [Point(REPETITION_CORPUS, b, v, opt, seed=sd) for b in LOWREP_BUDGETS[::-1] for v in LOWREP_KINDS
                           if (opt := seed0_optimum(lowrep, REPETITION_CORPUS, b, v, rungs)) is not None]
                    sweep(pts, REPETITION_PROTOCOL, lowrep)
            finally: os.chdir(here)
        elif stage == 'retrain':
            sweep([Point(SAMPLE, b, v, s) for b in HALFRUNG_BUDGETS for v in LADDER_KINDS for s in (1, 2)],
                  CPU_PROTOCOL, halfrung)
            pts = [Point(SAMPLE, b, v, opt, seed=sd) for sd in (1, 2) for b in HALFRUNG_BUDGETS for v in LADDER_KINDS
                   if (opt := seed0_optimum(halfrung, SAMPLE, b, v, (1, 1.5, 2))) is not None]
            sweep(pts, CPU_PROTOCOL, halfrung)
        else: raise SystemExit(f"unknown stage {stage!r}: choose from halfrung, lowrep, retrain")


if __name__ == '__main__':
    main()
