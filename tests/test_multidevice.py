"Data-parallel and FSDP training on 4 forced CPU devices give the losses of one device."
import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import dataclasses, json, sys, tempfile
    from pathlib import Path
    import jax
    from sgatlin_nb.runs import read_metrics
    from sgatlin_nb.train import PRESETS, make_mesh, train, init_state, state_shardings
    assert len(jax.devices()) == 4, jax.devices()
    cfg = dataclasses.replace(PRESETS['test-tiny'], steps=6, eval_every=6, ckpt_every=6)
    tmp = Path(tempfile.mkdtemp())
    res = {}
    for name, mesh, fsdp in [('one', make_mesh(jax.devices()[:1]), False), ('dp4', make_mesh(), False),
                             ('fsdp4', make_mesh(), True)]:
        c = dataclasses.replace(cfg, fsdp=fsdp)
        train(c, 'tinystories', tmp / name, progress=False, mesh=mesh)
        res[name] = [r['loss'] for r in read_metrics(tmp / name) if 'loss' in r]
    _, state, _ = init_state(cfg)
    specs = [str(s.spec) for s in jax.tree.leaves(state_shardings(state, make_mesh(), True))]
    res['n_sharded'] = sum("'data'" in s for s in specs)
    res['n_leaves'] = len(specs)
    print(json.dumps(res))
""")


def test_four_cpu_devices_match_one(data_dir):
    env = {**os.environ, "SGATLIN_DATA_DIR": str(data_dir), "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["n_sharded"] > res["n_leaves"] // 2, res  # FSDP really splits most of the state
    for name in ("dp4", "fsdp4"):
        assert len(res[name]) == len(res["one"]) == 6
        for a, b in zip(res[name], res["one"]):
            assert abs(a - b) <= 1e-4 * abs(b), (name, res[name], res["one"])
