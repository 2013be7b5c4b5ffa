"""Sampling speed with the key-value cache (`generate`) against the plain sampler (`generate_uncached`), side by side:
tokens per second at 200 and at 1,000 new tokens on the reference model, the two samplers alternating (A B A B ...)
over several repeats, medians and their ratio printed. Also the greedy tokens of both (they must be equal) and the
cache's bytes.

The reference model has seq_len 256, so 1,000 new tokens do not fit its context. Its weights do not depend on
seq_len (rotary positions, no position table), so the 1,000-token case loads them into the same model with
seq_len = prompt + 1,000: the text past position 256 is beyond what it was trained on, but the work per token is
what a model of that context does.

    python benchmarks/sample_bench.py --json benchmarks/results/sample_bench_cpu2.json   # 17 minutes on 2 busy cores
    python benchmarks/sample_bench.py --lengths 200 --repeats 1                           # a quick look
    python benchmarks/sample_bench.py --report benchmarks/results/sample_bench_cpu2.json  # print a recorded run again
"""
import argparse
import dataclasses
import json
import math
import os
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from sgatlin_nb.model import Transformer, generate, generate_uncached
from sgatlin_nb.reference import reference_model


def model_for(cfg, params, length: int):
    "The reference model, with its seq_len raised to `length` where it is shorter (the weights are the same)."
    mcfg = cfg.model if length <= cfg.model.seq_len else dataclasses.replace(cfg.model, seq_len=length)
    model = Transformer(mcfg, rngs=nnx.Rngs(0))
    nnx.update(model, params)
    return model


def timed(fn, *args, **kw):
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args, **kw))
    return time.perf_counter() - t0, out


def report(res: dict) -> str:
    lines = [f"sample_bench: jax {res['jax']} on {res['device']}, {res['cpu_cores']} CPU cores (load average "
             f"{res['load_before']} before the run, a shared machine: times are noisy, compare the ratios); "
             f"reference model (seq_len {res['reference_seq_len']}; longer runs load its weights into a longer "
             f"context), prompt {res['prompt_tokens']} tokens, batch 1, greedy; the samplers alternate, medians "
             f"of the repeats after a first (compiling) call",
             f"{'new tokens':>10} {'seq_len':>8} {'repeats':>8} {'uncached tok/s':>15} {'cached tok/s':>13} {'cached/uncached':>16} "
             f"{'first call s (unc/cached)':>27} {'cache MiB':>10} {'greedy equal':>13}"]
    for r in res['lengths']:
        lines.append(f"{r['n_new']:>10} {r['seq_len']:>8} {r['repeats']:>8} {r['tokens_per_s']['uncached']:>15.1f} "
                     f"{r['tokens_per_s']['cached']:>13.1f} {r['speedup']:>15.1f}x "
                     f"{r['first_call_s']['uncached']:>15.1f} / {r['first_call_s']['cached']:<9.1f} "
                     f"{r['cache_bytes'] / 2**20:>10.2f} {str(r['greedy_equal']):>13}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[200, 1000], help="new tokens per run")
    ap.add_argument("--repeats", type=int, nargs="+", default=[3, 2],
                    help="timed runs of each sampler, one number per length (the last one for the rest)")
    ap.add_argument("--prompt", default="Once upon a time")
    ap.add_argument("--json", help="also write the result here")
    ap.add_argument("--report", help="print the report of a recorded run and exit")
    args = ap.parse_args()
    if args.report:
        print(report(json.loads(Path(args.report).read_text())))
        return
    cfg, tokenizer, graphdef, params, _ = reference_model()
    prompt = jnp.asarray([tokenizer.encode(args.prompt).ids], jnp.int32)
    P = prompt.shape[1]
    res = {"jax": jax.__version__, "device": jax.devices()[0].device_kind, "cpu_cores": os.cpu_count(),
           "load_before": round(os.getloadavg()[0], 2), "prompt": args.prompt, "prompt_tokens": P,
           "reference_seq_len": cfg.model.seq_len, "lengths": []}
    for i, n_new in enumerate(args.lengths):
        repeats = args.repeats[min(i, len(args.repeats) - 1)]
        model = model_for(cfg, params, P + n_new)
        fns = {"uncached": generate_uncached, "cached": generate}
        first_call_s, outs = {}, {}
        for name, fn in fns.items():  # the first call compiles and runs (static shapes: one compile per length)
            first_call_s[name], outs[name] = timed(fn, model, prompt, n_new)
        times = {name: [] for name in fns}
        for _ in range(repeats):
            for name, fn in fns.items():
                t, out = timed(fn, model, prompt, n_new)
                times[name].append(t)
                assert (out == outs[name]).all(), f"{name} is not deterministic"
        med = {k: statistics.median(v) for k, v in times.items()}
        tps = {k: n_new / v for k, v in med.items()}
        a, b = np.asarray(outs["uncached"][0, P:]), np.asarray(outs["cached"][0, P:])
        cache_shapes = jax.eval_shape(lambda: model.init_cache(1, P + n_new))
        r = {"n_new": n_new, "seq_len": model.cfg.seq_len, "repeats": repeats, "times_s": times, "median_s": med, "tokens_per_s": tps,
             "speedup": tps["cached"] / tps["uncached"], "first_call_s": first_call_s,
             "cache_bytes": sum(math.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(cache_shapes)),
             "greedy_equal": bool((a == b).all()),
             "first_difference": int(np.argmax(a != b)) if (a != b).any() else None}
        res["lengths"].append(r)
        print(f"{n_new} new tokens: uncached {tps['uncached']:.1f} tok/s, cached {tps['cached']:.1f} tok/s, "
              f"ratio {r['speedup']:.1f}x, greedy equal {r['greedy_equal']}", flush=True)
    res["load_after"] = round(os.getloadavg()[0], 2)
    print(report(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
