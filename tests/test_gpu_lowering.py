"""Every paper preset's training step lowers for CUDA on an 8-device mesh: the presets 92_gpu does not lower itself
(`preset_ends`, which nbdev-test runs), so together they cover all; one step also compiles for 8 forced CPU devices."""
import json
import os
import subprocess
import sys
import textwrap

# A child process: XLA_FLAGS must be set before jax is imported, and pytest's process has imported it already.
SCRIPT = textwrap.dedent('''
    import json, sys, jax
    from sgatlin_nb.gpu import (paper_presets, preset_ends, export_train_step, train_step_args, state_bytes, abstract_state,
                                equal_flops_swiglu, lowering_counts)
    from sgatlin_nb.distributed import make_mesh
    from sgatlin_nb.train import state_shardings
    mesh = make_mesh()
    presets = dict(paper_presets())
    out = {'devices': jax.device_count(), 'lowered': {}, 'on_page': sorted(preset_ends()), 'counts': {}, 'twins': {},
           'presets': sorted(presets)}
    for name, cfg in presets.items():
        routed = cfg.model.ffw.kind in ('sgatlin', 'peer', 'moe')
        if name in preset_ends() and not routed: continue
        e = export_train_step(cfg, mesh)  # for CUDA: the GPU kernels
        c = lowering_counts(e, d_model=cfg.model.d_model if routed else None)
        if name not in preset_ends(): out['lowered'][name] = c
        if routed: out['counts'][name] = c
    for name in ('sgatlin-s2', 'sgatlin-s8'):  # the SwiGLU twins' loops and scatter-adds do not depend on the size
        out['twins'][name] = lowering_counts(export_train_step(equal_flops_swiglu(presets[name]), mesh))
    # compile one preset for the 8 CPU devices: the partitioner runs, and the arguments are the sharded state + batch
    cfg = dict(paper_presets(kinds=()))['tinystories']
    step, args = train_step_args(cfg, mesh)
    mem = step.lower(*args).compile(compiler_options={'xla_backend_optimization_level': 0}).memory_analysis()
    _, state, _ = abstract_state(cfg)
    sb = state_bytes(state, state_shardings(state, mesh, fsdp=True))
    out['compiled_args'] = mem.argument_size_in_bytes
    out['expected_args'] = sb['params'] + sb['opt_state'] + cfg.batch_size // 8 * (cfg.model.seq_len + 1) * 4
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
    # the routed presets lower to the GPU path: no more loops than a SwiGLU twin (the scan over micro-batches), no float
    # scatter-add (atomic adds on a GPU) anywhere, no Triton loop whose length depends on the data, no float32 table copy
    twins = list(out["twins"].values())
    assert twins[0]["while"] == twins[1]["while"] and all(t["float scatter-add"] == 0 for t in twins), twins
    assert len(out["counts"]) == 3 * 7 + 2, sorted(out["counts"])  # sgatlin, PEER and MoE at every rung, TinyStories, the ablation model
    for name, c in out["lowered"].items():  # the dense presets too: no float scatter-add (the embedding's gradient), no extra loop
        assert c["float scatter-add"] == 0 and c["while"] <= twins[0]["while"], (name, c)
    for name, c in out["counts"].items():
        assert c["while"] <= twins[0]["while"] and c["float scatter-add"] == 0, (name, c)
        assert c["data-dependent kernels"] == 0 and c["f32 table reads"] == 0 and c["serial steps"] <= 256, (name, c)
        assert (c["triton"] > 0) == (not name.startswith('moe')), (name, c)
