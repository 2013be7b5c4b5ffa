"""Time and peak memory of one exact attribution graph (`attribution_graph`, page 15a) by prompt length, and of
`write_graph` (what `sgatlin graph` runs: the graph, pruned, written as JSON and HTML) at `--command-tokens`.

Each length runs in a fresh process on the reference model (`reference_run()`), so the peak resident memory
(`ru_maxrss`) is that of one graph, not of everything a page did before. The graph is built twice: the first call
compiles for that length, the second is timed alone. Page 15a builds the short graphs itself, reads the long ones from
the file written here, and checks that the lengths it built agree with the file in everything but time and memory.

    python benchmarks/graph_cost.py --tokens 8 32 64 128 --command-tokens 32 64 --out nbs/results/graph_cost_cpu2.json
"""
import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = "Once upon a time, there was a little dog named Max. Max liked to play in the park with his friends every day. " * 8

ONE = '''
import json, resource, sys, time
import numpy as np
from flax import nnx
from sgatlin_nb.graph import attribution_graph, completeness_error
from sgatlin_nb.intervention import bos_id
from sgatlin_nb.reference import reference_run
from sgatlin_nb.runs import load_run
S, text = int(sys.argv[1]), sys.argv[2]
cfg, tokenizer, graphdef, params, _ = load_run(reference_run())
model = nnx.merge(graphdef, params)
ids = [bos_id(tokenizer), *tokenizer.encode(text).ids][:S]
assert len(ids) == S, (len(ids), S)
t0 = time.perf_counter(); attribution_graph(model, ids); first = time.perf_counter() - t0
t0 = time.perf_counter(); g = attribution_graph(model, ids); second = time.perf_counter() - t0
print(json.dumps({"tokens": S, "nodes": len(g.nodes), "nonzero edges": int(np.count_nonzero(g.adjacency)),
                  "adjacency MB": g.adjacency.nbytes / 1e6, "seconds": second, "first call seconds": first,
                  "peak MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "completeness gap": completeness_error(g)}))
'''

COMMAND = '''
import json, resource, sys, tempfile, time
from pathlib import Path
from flax import nnx
from sgatlin_nb.graph import write_graph
from sgatlin_nb.intervention import bos_id
from sgatlin_nb.reference import reference_run
from sgatlin_nb.runs import load_run
S, text = int(sys.argv[1]), sys.argv[2]
cfg, tokenizer, graphdef, params, _ = load_run(reference_run())
model = nnx.merge(graphdef, params)
bos = bos_id(tokenizer)
ids = tokenizer.encode(text).ids[:S - 1]
prompt = tokenizer.decode(ids)
assert len(tokenizer.encode(prompt).ids) == S - 1
t0 = time.perf_counter(); s = write_graph(model, tokenizer, prompt, Path(tempfile.mkdtemp()) / 'g', bos=bos)
print(json.dumps({"tokens": S, "nodes": s["nodes"], "command seconds": time.perf_counter() - t0,
                  "command peak MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
'''


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[8, 32, 64, 128])
    ap.add_argument("--command-tokens", type=int, nargs="*", default=[32, 64])
    ap.add_argument("--out", default=str(ROOT / "nbs" / "results" / "graph_cost_cpu2.json"))
    args = ap.parse_args(argv)
    env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # each first call compiles, as it would for a new user
    rows = []
    for S in args.tokens:
        res = subprocess.run([sys.executable, "-c", ONE, str(S), TEXT], env=env, capture_output=True, text=True)
        if res.returncode: sys.exit(f"graph of {S} tokens failed:\n{res.stderr[-3000:]}")
        rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
        print({k: round(v, 3) if isinstance(v, float) else v for k, v in rows[-1].items()}, flush=True)
    for S in args.command_tokens:
        res = subprocess.run([sys.executable, "-c", COMMAND, str(S), TEXT], env=env, capture_output=True, text=True)
        if res.returncode: sys.exit(f"write_graph of {S} tokens failed:\n{res.stderr[-3000:]}")
        got = json.loads(res.stdout.strip().splitlines()[-1])
        row = next((r for r in rows if r["tokens"] == S), None)
        if row is None: rows.append(row := {"tokens": S})
        row.update({k: v for k, v in got.items() if k != "tokens"})
        print(got, flush=True)
    import jax
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.machine()) if Path("/proc/cpuinfo").exists() else platform.machine()
    out = {"machine": {"cpus": os.cpu_count(), "processor": cpu, "jax": jax.__version__}, "text": TEXT, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
