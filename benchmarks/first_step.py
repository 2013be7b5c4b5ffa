"""Time to the first training step on a large corpus, and corpus preparation by number of cores.

1. `sgatlin train --config test-tiny --steps 1` on a JSON-lines corpus of `--gb` gigabytes (TinyStories' stories, numbered
   so that no two documents are equal), timed whole: start, tokenizing, compiling, one step. With `--before TREE` (a
   checkout of an earlier commit, e.g. made with `git worktree add`), the same command runs on that tree's package
   too, on a corpus of `--before-gb`, since the earlier code tokenizes every document first.
2. `tokenize_corpus` of the first `--prep-mb` megabytes of that corpus with the tokenizers library on 1 and on all cores
   (`RAYON_NUM_THREADS`), in fresh processes: tokens per second, and whether the files are the same byte for byte.

    python benchmarks/first_step.py --gb 4 --before /tmp/before --before-gb 0.25
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def make_corpus(path: Path, gb: float) -> Path:
    "A JSON-lines corpus of about `gb` GB: the TinyStories sample's stories over and over, each numbered."
    if path.exists() and path.stat().st_size >= gb * 1e9 * 0.99: return path
    sys.path.insert(0, str(ROOT))
    from sgatlin_nb.data import read_texts
    stories = list(read_texts("tinystories-train"))
    path.parent.mkdir(parents=True, exist_ok=True)
    n, size = 0, 0
    with open(path, "w") as f:
        while size < gb * 1e9:
            for s in stories:
                line = json.dumps({"text": f"Story {n}. {s}"}) + "\n"
                f.write(line)
                n, size = n + 1, size + len(line.encode())
    return path


def first_step(tree: Path, corpus: Path) -> float:
    "Seconds of `sgatlin train --config test-tiny --steps 1` on `corpus` with the package of `tree`."
    out = Path(tempfile.mkdtemp()) / "run"
    env = {**os.environ, "PYTHONPATH": str(tree), "JAX_PLATFORMS": "cpu"}
    code = (f"import sys, sgatlin_nb; assert sgatlin_nb.__file__.startswith({str(tree)!r}), sgatlin_nb.__file__; "
            "from sgatlin_nb.cli import main; sys.exit(main())")
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", code, "train", "--config", "test-tiny", "--data", str(corpus), "--steps", "1",
                          "--out", str(out), "--quiet"], env=env, capture_output=True, text=True,
                         cwd=out.parent)  # not the repository, whose sgatlin_nb would come first on `python -c`'s path
    if res.returncode: raise SystemExit(f"the run on {tree} failed:\n{res.stderr[-2000:]}")
    return time.perf_counter() - t0


PREP = """
import hashlib, json, sys, time
from sgatlin_nb.data import load_tokenizer, tokenize_corpus
corpus, out, n_bytes = sys.argv[1], sys.argv[2], int(sys.argv[3])
head = out + '.jsonl'
with open(corpus, 'rb') as f, open(head, 'wb') as g: g.write(f.read(n_bytes).rsplit(b'\\n', 1)[0] + b'\\n')
tok = load_tokenizer('sgatlin')
t0 = time.perf_counter()
tf = tokenize_corpus(head, tok, out, progress=False, batch_docs=4096)
dt = time.perf_counter() - t0
print(json.dumps({'tokens': len(tf), 'seconds': dt, 'sha256': hashlib.sha256(open(out, 'rb').read()).hexdigest()}))
"""


def prep(corpus: Path, mb: float, threads: int) -> dict:
    out = str(Path(tempfile.mkdtemp()) / "prep.bin")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAYON_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "true"}
    res = subprocess.run([sys.executable, "-c", PREP, str(corpus), out, str(int(mb * 1e6))], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=4.0, help="size of the corpus the current tree trains on")
    ap.add_argument("--before", type=Path, help="a checkout of an earlier commit, timed on a corpus of --before-gb")
    ap.add_argument("--before-gb", type=float, default=0.25)
    ap.add_argument("--prep-mb", type=float, default=64.0)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "sgatlin_first_step")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    from sgatlin_nb.data import data_root
    if data_root() is None: raise SystemExit("no data folder: the TinyStories sample is the text (the repository's data/, or SGATLIN_DATA_DIR)")
    result = {}
    big = make_corpus(args.dir / f"corpus-{args.gb:g}gb.jsonl", args.gb)
    result["now_s"] = first_step(ROOT, big)
    print(f"first step on a {big.stat().st_size / 1e9:.1f} GB corpus: {result['now_s']:.1f} s (this tree)")
    if args.before:
        small = make_corpus(args.dir / f"corpus-{args.before_gb:g}gb.jsonl", args.before_gb)
        result["now_small_s"] = first_step(ROOT, small)
        result["before_small_s"] = first_step(args.before, small)
        print(f"first step on a {small.stat().st_size / 1e9:.2f} GB corpus: this tree {result['now_small_s']:.1f} s, "
              f"{args.before} {result['before_small_s']:.1f} s: {result['before_small_s'] / result['now_small_s']:.1f}x")
    cores = os.cpu_count()
    runs = {n: prep(big, args.prep_mb, n) for n in sorted({1, cores})}
    for n, r in runs.items():
        print(f"preparing {args.prep_mb:g} MB on {n} core(s): {r['tokens'] / r['seconds']:,.0f} tokens/s")
    print(f"{cores} cores / 1 core: {runs[cores]['tokens'] / runs[cores]['seconds'] / (runs[1]['tokens'] / runs[1]['seconds']):.2f}x; "
          f"the same file: {len({r['sha256'] for r in runs.values()}) == 1}")
    result["prep"] = runs
    if args.json: args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
