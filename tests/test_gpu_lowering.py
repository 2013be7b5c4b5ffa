"""Every paper preset's training step lowers for CUDA on an 8-device mesh and keeps the GPU path (`gpu_path_problems`):
here the presets 92_gpu does not lower itself (`preset_ends`, which nbdev-test runs and checks the same way), so
together they cover all, each once; one step also compiles for 8 forced CPU devices."""
import json
import os
import subprocess
import sys
import textwrap

# A child process: XLA_FLAGS must be set before jax is imported, and pytest's process has imported it already.
SCRIPT = textwrap.dedent('''
    import json, sys, jax
    from sgatlin_nb.gpu import (paper_presets, preset_ends, export_train_step, train_step_args, state_bytes, abstract_state,
                                equal_flops_swiglu, lowering_counts, gpu_path_problems, ROUTED_KINDS, partition_report)
    from sgatlin_nb.configs import PRESETS
    from sgatlin_nb.distributed import make_mesh
    from sgatlin_nb.train import state_shardings
    mesh = make_mesh()
    presets = dict(paper_presets())
    out = {'devices': jax.device_count(), 'lowered': {}, 'on_page': sorted(preset_ends()), 'kinds': {}, 'twins': {},
           'presets': sorted(presets)}
    for name in ('sgatlin-s2', 'sgatlin-s8'):  # the SwiGLU twins' loops and scatter-adds do not depend on the size
        out['twins'][name] = lowering_counts(export_train_step(equal_flops_swiglu(presets[name]), mesh))
    for name, cfg in presets.items():
        if name in preset_ends(): continue  # 92 lowers and checks it
        routed = cfg.model.ffw.kind in ROUTED_KINDS
        c = lowering_counts(export_train_step(cfg, mesh), d_model=cfg.model.d_model if routed else None)  # for CUDA
        out['lowered'][name], out['kinds'][name] = c, cfg.model.ffw.kind
    twin_while = out['twins']['sgatlin-s2']['while']
    out['problems'] = {name: gpu_path_problems(out['kinds'][name], c, twin_while) for name, c in out['lowered'].items()}
    # compile one preset for the 8 CPU devices: the partitioner runs, and the arguments are the sharded state + batch
    cfg = dict(paper_presets(kinds=()))['tinystories']
    step, args = train_step_args(cfg, mesh)
    mem = step.lower(*args).compile(compiler_options={'xla_backend_optimization_level': 0}).memory_analysis()
    _, state, _ = abstract_state(cfg)
    sb = state_bytes(state, state_shardings(state, mesh, fsdp=True))
    out['compiled_args'] = mem.argument_size_in_bytes
    out['expected_args'] = sb['params'] + sb['opt_state'] + cfg.batch_size // 8 * (cfg.model.seq_len + 1) * 4
    # 92's partition report compiles without the backend's code optimization: the same report as with it (a small
    # sgatlin model, data parallel)
    out['partition'] = [[partition_report(PRESETS['test-tiny'], mesh, optimize=o) for o in (True, False)]]
    print(json.dumps(out))
''')

def test_presets_lower_for_cuda_on_8_devices():
    env = {**os.environ, 'JAX_PLATFORMS': 'cpu', 'XLA_FLAGS': '--xla_force_host_platform_device_count=8'}
    res = subprocess.run([sys.executable, '-c', SCRIPT], env=env, capture_output=True, text=True, timeout=1100)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out['devices'] == 8
    assert sorted([*out['lowered'], *out['on_page']]) == out['presets'], out  # each preset lowered once, here or on 92's page
    assert out['compiled_args'] == out['expected_args'], out
    # every preset lowered here keeps the GPU path (the routed ones: no data-dependent loop, no float32 table read,
    # Triton kernels but for the MoE); the twins' loops do not depend on the size, and no twin has a float scatter-add
    twins = list(out["twins"].values())
    assert twins[0]["while"] == twins[1]["while"] and all(t["float scatter-add"] == 0 for t in twins), twins
    routed = [n for n, k in out["kinds"].items() if k in ("sgatlin", "peer", "moe")]
    assert len(routed) == 3 * 5, sorted(routed)  # sgatlin, PEER and MoE at the rungs 92 does not lower (3 to 7)
    assert {n: p for n, p in out["problems"].items() if p} == {}, out["problems"]
    for optimized, not_optimized in out["partition"]:  # every field, collectives and temporaries included
        assert optimized == not_optimized and optimized["collectives"] > 0 and optimized["temporaries_gb"] > 0, (optimized, not_optimized)
