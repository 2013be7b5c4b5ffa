"""Step time of the training loop when it reads each step's loss at once (the host waits for the device) against
reading it one step late (`train`'s way), side by side: blocks of steps alternate A B A B ..., and the ratio of the
medians is printed. On a CPU the device is the host's own cores, so little is expected; on a GPU the gap is the
host's batch preparation and dispatch, which reading late overlaps with the device's work.

    python benchmarks/metrics_lag.py                       # tinystories-cpu, about a minute on 2 cores
    python benchmarks/metrics_lag.py --config test-tiny --blocks 10
"""
import argparse
import json
import statistics
import time

import jax

from sgatlin_nb.data import batch_at, prepare_data
from sgatlin_nb.configs import PRESETS
from sgatlin_nb.distributed import make_mesh, shard_batch
from sgatlin_nb.train import init_state, make_train_step, state_shardings


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="tinystories-cpu", choices=list(PRESETS))
    ap.add_argument("--data", default="tinystories")
    ap.add_argument("--steps", type=int, default=10, help="steps per block")
    ap.add_argument("--blocks", type=int, default=6, help="blocks of each way")
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args()
    import tempfile
    from pathlib import Path
    cfg = PRESETS[args.config]
    _, train_tf, _ = prepare_data(cfg, args.data, Path(tempfile.mkdtemp()) / "run", progress=False)
    mesh = make_mesh()
    graphdef, state, tx = init_state(cfg)
    sh = state_shardings(state, mesh, cfg.fsdp)
    state = jax.device_put(state, sh)
    step_fn = make_train_step(graphdef, tx, cfg.grad_accum, sh, mesh)
    step = [0]

    def block(late: bool) -> float:
        nonlocal state
        pending, t0 = None, time.perf_counter()
        for _ in range(args.steps):
            batch = shard_batch(batch_at(train_tf, cfg.seed, step[0], cfg.batch_size, cfg.model.seq_len), mesh)
            state, m = step_fn(state, batch)
            step[0] += 1
            if late:
                if pending is not None: float(pending["loss"])
                pending = m
            else:
                float(m["loss"])
        if pending is not None: float(pending["loss"])
        return (time.perf_counter() - t0) / args.steps

    block(False), block(True)  # compile and warm up
    times = {"at once": [], "one step late": []}
    for _ in range(args.blocks):
        times["at once"].append(block(False))
        times["one step late"].append(block(True))
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["one step late"] / med["at once"]
    print(f"{args.config} on {jax.devices()[0].device_kind} ({jax.device_count()} devices), {args.blocks} blocks of "
          f"{args.steps} steps each way")
    for k, v in med.items(): print(f"  {k:14s} median step {v * 1e3:8.2f} ms")
    print(f"  step time, one step late / at once: {ratio:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"config": args.config, "device": jax.devices()[0].device_kind,
                                               "median_s": med, "ratio": ratio, "times_s": times}, indent=1) + "\n")


if __name__ == "__main__":
    main()
