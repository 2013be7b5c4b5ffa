"""Issue 50: the five feedforward kinds on standard tasks at the CPU sweep's largest budget (1.28e13 FLOPs), where every
kind's isoflop optimum is scale 2 (07_scaling). Retrains those optima with the sweep's code (`run_sweep`, the CPU
protocol, one seed; runs kept), scores each run and the reference model on the task samples with `score_tasks`, and
writes nbs/results/tasks_cpu.json, which 08a_tasks reads: seed 0 under `runs`, any other seed under `seed_runs`, the
file's other seeds kept. Resumable: finished runs are not trained again.

    python scripts/tasks_kinds.py [WORK_DIR] [SEED]   # about an hour a seed on two quiet cores (training), 4 min scoring
"""
import json, os, sys, time
from pathlib import Path
ROOT = Path(__file__).resolve().parent.parent
os.chdir(ROOT / 'nbs')
from sgatlin_nb.reference import REFERENCE_DIR
from sgatlin_nb.runs import code_identity
from sgatlin_nb.scaling import CPU_PROTOCOL, Point, read_results, run_sweep
from sgatlin_nb.tasks import score_tasks

BUDGET, SCALE, KINDS = 1.28e13, 2, ('mlp', 'swiglu', 'moe', 'peer', 'sgatlin')
TASK_NAMES = ['lambada', 'hellaswag', 'zorro', 'copy']

def _compact(tasks: dict) -> dict:
    "A task's results without every choice's score, item nats to a micro-nat (the file stays small)."
    out = {n: {k: v for k, v in r.items() if k != 'scores'} for n, r in tasks.items()}
    for r in out.values(): r['per_item'] = {**r['per_item'], 'nats': [round(x, 6) for x in r['per_item']['nats']]}
    return out

def main(work: str = '/tmp/task_runs', seed: str = '0'):
    work, seed = Path(work), int(seed)
    points = [Point('tinystories', BUDGET, k, SCALE, seed=seed) for k in KINDS]
    run_sweep(points, CPU_PROTOCOL, work / 'retrained.json', work_dir=work, keep_runs=True)
    trained = {r['key']: r for r in read_results(work / 'retrained.json')['runs']}
    sweep = {r['key']: r for r in read_results(ROOT / 'nbs/results/isoflop_cpu_extension.json')['runs']}
    path = ROOT / 'nbs/results/tasks_cpu.json'
    old = json.loads(path.read_text()) if path.exists() else {}
    runs = {}
    for k, p in zip(KINDS, points):
        t0 = time.perf_counter()
        res = score_tasks(work / p.key, TASK_NAMES, progress=False, details=True)
        runs[k] = {'key': p.key, 'eval_ppl': trained[p.key]['eval_ppl'], 'sweep_eval_ppl': sweep[p.key]['eval_ppl'],
                   'train_s': trained[p.key]['wall_s'], 'params': trained[p.key]['params'], 'score_s': time.perf_counter() - t0,
                   'tasks': _compact(res['tasks'])}
        print(k, {n: round(r['bpb'], 3) for n, r in res['tasks'].items()}, flush=True)
    if seed == 0:
        ref = score_tasks(REFERENCE_DIR, TASK_NAMES, progress=False, details=True)
        out = {'budget': BUDGET, 'scale': SCALE, 'seed': 0, 'tasks': TASK_NAMES, 'code': code_identity(), 'runs': runs,
               'reference': {'tasks': _compact(ref['tasks'])}, 'seed_runs': old.get('seed_runs', {})}
    else:
        out = {**old, 'seed_runs': {**old.get('seed_runs', {}), str(seed): {'code': code_identity(), 'runs': runs}}}
    path.write_text(json.dumps(out) + '\n')

if __name__ == '__main__': main(*sys.argv[1:])
