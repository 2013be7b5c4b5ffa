"""Scanned blocks against the Python loop of blocks (`use_scan`, 04_transformer): the training step of a paper preset
lowered for CUDA on an abstract 8-device FSDP mesh (seconds, and the size of its StableHLO text) and compiled for 8
forced CPU devices (seconds), both ways in one run; and the StableHLO size of the scanned step at two depths.

    python benchmarks/scan_compile.py --json benchmarks/results/scan_compile_cpu2.json    # sgatlin-s8, about 3 minutes on 2 cores

Each compile runs in a fresh process, so neither way profits from the other's caches."""
import argparse
import json
import os
import subprocess
import sys
import time


def child(preset: str, scan: bool, layers: int | None, compile_: bool) -> dict:
    import jax
    from sgatlin_nb.configs import make_config
    from sgatlin_nb.gpu import export_train_step, fsdp_mesh, paper_presets, train_step_args
    from sgatlin_nb.distributed import make_mesh
    from sgatlin_nb.model import use_scan
    cfg = dict(paper_presets(scales=(int(preset.rsplit('-s', 1)[1]),)))[preset]
    if layers: cfg = make_config(cfg, {'model.n_layers': layers})
    t0 = time.perf_counter()
    exported = export_train_step(cfg, fsdp_mesh(8), scan=scan)
    row = {'preset': preset, 'n_layers': cfg.model.n_layers, 'scan': scan, 'export_s': time.perf_counter() - t0,
           'stablehlo_chars': len(exported.mlir_module())}
    text = exported.mlir_module()
    row.update({op: text.count(f'stablehlo.{op}') for op in ('all_gather', 'reduce_scatter', 'while')})
    if compile_:
        step, args = train_step_args(cfg, make_mesh(jax.devices()[:8]))
        t0 = time.perf_counter()
        with use_scan(scan): step.lower(*args).compile()
        row['compile_s'] = time.perf_counter() - t0
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--preset', default='sgatlin-s8')
    p.add_argument('--json', help='write the rows here')
    p.add_argument('--child', help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print(json.dumps(child(**json.loads(a.child))))
        return
    env = {**os.environ, 'JAX_PLATFORMS': 'cpu', 'XLA_FLAGS': '--xla_force_host_platform_device_count=8'}
    jobs = [dict(preset=a.preset, scan=s, layers=None, compile_=True) for s in (False, True)]
    jobs += [dict(preset=a.preset, scan=True, layers=n, compile_=False) for n in (2, 4)]
    rows = []
    for job in jobs:
        out = subprocess.run([sys.executable, __file__, '--child', json.dumps(job)], env=env, capture_output=True, text=True)
        if out.returncode: sys.exit(f'{job} failed:\n{out.stderr[-3000:]}')
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        r = rows[-1]
        print(f"{r['preset']} {r['n_layers']} blocks, {'scan' if r['scan'] else 'loop'}: export {r['export_s']:.1f} s, "
              f"StableHLO {r['stablehlo_chars'] / 1e6:.2f} M chars, {r['all_gather']} all-gathers, {r['reduce_scatter']} reduce-scatters" + (f", compile for 8 CPU devices {r['compile_s']:.1f} s" if 'compile_s' in r else ''),
              flush=True)
    loop, scan = rows[0], rows[1]
    print(f"scan / loop: export x{scan['export_s'] / loop['export_s']:.2f}, compile x{scan['compile_s'] / loop['compile_s']:.2f}, "
          f"StableHLO x{scan['stablehlo_chars'] / loop['stablehlo_chars']:.2f}")
    if a.json:
        with open(a.json, 'w') as f: json.dump({'rows': rows}, f, indent=1)


if __name__ == '__main__':
    main()
