"""Measure how far a retrained run drifts from its committed result, for the run that 07_scaling and 08_ablations retrain.

    python scripts/rerun_noise.py        # writes nbs/results/rerun_noise.json (about 4 minutes on 2 cores)

Each run is trained again on 1, 2, 4 and 8 forced CPU devices and with older instruction sets (`rerun_noise` in
07_scaling), and the config they trained with is kept; the pages hold a rerun to `noise_tolerance` of what this measures. Run it again after retraining either committed file.
"""
import json, sys
from pathlib import Path

NBS = Path(__file__).resolve().parent.parent / 'nbs'

def main():
    from sgatlin_nb.scaling import CPU_PROTOCOL, read_results, record_point, rerun_noise
    # the runs the pages retrain: 07 the smallest run of its smallest budget, 08 the ablation with the fewest steps there
    sweep = read_results(NBS / 'results/isoflop_cpu.json')['runs']
    ablations = read_results(NBS / 'results/ablations_cpu.json')['runs']
    picks = {'07_scaling': ('results/isoflop_cpu.json', min(sweep, key=lambda r: (r['budget'], r['params'], r['key']))['key']),
             '08_ablations': ('results/ablations_cpu.json', min(ablations, key=lambda r: (r['budget'], r['steps'], r['key']))['key'])}
    out = {}
    for page, (path, key) in picks.items():
        out[page] = {'results': path, **rerun_noise(NBS / path, key)}
        # the config every rerun trained with (this code's protocol): the pages use the bound of their own device count
        # while the config they retrain with is this one (what the noise depends on, with the device count)
        committed = next(r for r in read_results(NBS / path)['runs'] if r['key'] == key)
        out[page]['config'] = json.loads(json.dumps(CPU_PROTOCOL.config(record_point(committed)).to_dict()))
        print(page, key, json.dumps(out[page]['reruns']), 'committed', round(out[page]['committed'], 3), flush=True)
    (NBS / 'results/rerun_noise.json').write_text(json.dumps(out, indent=1) + '\n')
    print('wrote', NBS / 'results/rerun_noise.json')
    return 0

if __name__ == '__main__':
    sys.exit(main())
