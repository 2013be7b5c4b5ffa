"""Train the reference model that the interpretability pages study, and write its committed files.

    python scripts/train_reference.py                 # train into runs/reference, then write sgatlin_nb/reference_model
    python scripts/train_reference.py --stop-at 3     # only the first 3 steps (the CI check of this script)

The data folder is $SGATLIN_DATA_DIR, else the repository's data/ (the samples it carries).
Deterministic: the same machine gives the same weights; see nbs/09_reference.ipynb.
"""
import argparse, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--work', default='runs/reference', help='work folder (story file and training run), from the repository root by default')
    ap.add_argument('--stop-at', type=int, default=None, help='stop after this step (the schedule stays the full run\'s)')
    ap.add_argument('--export', default=None, help='where to write the committed files: a new or empty folder, or one holding a reference model, which is replaced (default: the package\'s reference_model folder)')
    ap.add_argument('--no-progress', action='store_true')
    a = ap.parse_args(argv)
    from sgatlin_nb import reference
    run = reference.train_reference(a.work, stop_at=a.stop_at, progress=not a.no_progress)
    if a.stop_at is None:
        manifest = reference.export_reference(run, a.export or reference.REFERENCE_DIR)
        print(f"wrote {a.export or reference.REFERENCE_DIR}: held-out perplexity {manifest['eval']['ppl']:.2f}")
    return 0

if __name__ == '__main__':
    sys.exit(main())
