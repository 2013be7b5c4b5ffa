"""`sgatlin export --hf` (nbs/08b_hf.ipynb, nbs/08c_hf_modeling.ipynb): for every feedforward kind and the ablations'
options, the torch model transformers loads gives the JAX model's logits (1e-4, float32), the same gate indices at every
position and layer, and the same greedy tokens; a reloaded export saves bit-identically; bad input is one line."""
import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from conftest import run_in_process

from sgatlin_nb.baselines import FFWConfig, FFW_KINDS
from sgatlin_nb.data import TOKENIZERS
from sgatlin_nb.model import GATED_KINDS, ModelConfig, Transformer, generate
from sgatlin_nb.reference import REFERENCE_DIR
from sgatlin_nb.runs import load_run

import torch  # noqa: E402  (torch and transformers: the dev and hf extras)
import transformers  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from sgatlin_nb import hf, hf_modeling  # noqa: E402

D, V, T = 64, 8192, 32  # test-tiny's width, vocabulary and context
VARIANTS = {  # every kind, and each option an ablation or a baseline can set
    'sgatlin': FFWConfig('sgatlin', D, 256, n_channels=2, k=4, d_key=32),
    'sgatlin-relu-peer-router': FFWConfig('sgatlin', D, 256, n_channels=2, k=4, d_key=32, activation='relu', router='product_key_value'),
    'sgatlin-gelu': FFWConfig('sgatlin', D, 256, n_channels=2, k=4, d_key=32, activation='gelu'),
    'peer': FFWConfig('peer', D, 256, n_channels=2, k=4, d_key=32),
    'moe': FFWConfig('moe', D, 32, n_experts=4, top_k=2),
    'moe-authors': FFWConfig('moe', D, 32, n_experts=4, top_k=2, softmax_over='all', router_bias=False),
    'mlp': FFWConfig('mlp', D, 128),
    'mlp-swish': FFWConfig('mlp', D, 128, activation='swish'),
    'swiglu': FFWConfig('swiglu', D, 128),
    'swiglu-gpt-oss': FFWConfig('swiglu', D, 128, swiglu_variant='gpt_oss'),
}
LARGEST = {}  # variant -> largest |torch - JAX| logit difference, printed at the end


def test_the_kinds_are_the_same_everywhere():
    assert set(hf.HF_KINDS) == set(hf_modeling.FFW_KINDS) == set(FFW_KINDS)
    assert {v.kind for v in VARIANTS.values()} == set(FFW_KINDS)


def load(folder):
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
    model.generation_config.eos_token_id = None  # the JAX `generate` never stops early
    return model


def torch_run(model, tokens_BxT):
    "Logits and each layer's gate output (None for kinds without a gate) of the torch model."
    gates, hooks = [], []
    for block in model.model.blocks:
        if hasattr(block.ffw, 'gate'): hooks.append(block.ffw.gate.register_forward_hook(lambda m, a, out: gates.append(out)))
    with torch.no_grad(): logits = model(torch.as_tensor(np.asarray(tokens_BxT), dtype=torch.long)).logits.numpy()
    for h in hooks: h.remove()
    return logits, gates


def check_model(folder, jax_model, tokens_BxT, prompt_len=5, n_new=None, greedy=True):
    "The export in `folder` against `jax_model`: logits, gates and (with `greedy`) greedy tokens; the model and the largest logit difference."
    model = load(folder)
    logits, gates = torch_run(model, tokens_BxT)
    tokens = jnp.asarray(tokens_BxT, jnp.int32)
    if jax_model.cfg.ffw.kind in GATED_KINDS:
        jax_logits, jax_gates = jax_model(tokens, return_gates=True)
        assert len(gates) == len(jax_gates) == jax_model.cfg.n_layers
        for (scores, indices), want in zip(gates, jax_gates):
            np.testing.assert_array_equal(indices.numpy(), np.asarray(want.indices))
            np.testing.assert_allclose(scores.numpy(), np.asarray(want.scores), atol=1e-4, rtol=0)
    else:
        jax_logits = jax_model(tokens)
        assert gates == []
    largest = float(np.abs(logits - np.asarray(jax_logits)).max())
    assert largest < 1e-4, largest
    if not greedy: return model, largest
    with torch.no_grad():  # the cache by hand, without the positions `generate` passes: the prefix, then one token
        full = torch.as_tensor(np.asarray(tokens_BxT), dtype=torch.long)
        first = model(full[:, :-1], use_cache=True)
        last = model(full[:, -1:], cache=getattr(first, 'cache', None) or first.past_key_values).logits[:, -1].numpy()
    np.testing.assert_allclose(last, logits[:, -1], atol=1e-4, rtol=0)
    n_new = n_new or tokens.shape[1] - prompt_len
    want = np.asarray(generate(jax_model, tokens[:, :prompt_len], n_new))
    with torch.no_grad():
        got = model.generate(torch.as_tensor(want[:, :prompt_len], dtype=torch.long), max_new_tokens=n_new, do_sample=False,
                             pad_token_id=0).numpy()
    np.testing.assert_array_equal(got, want)
    return model, largest


@pytest.fixture(scope='module')
def tokenizer_file(data_dir):
    return data_dir / TOKENIZERS['sgatlin']


@pytest.mark.parametrize('name', list(VARIANTS))
def test_every_kind_matches_jax(name, tokenizer_file, tmp_path):
    cfg = ModelConfig(vocab_size=V, d_model=D, n_layers=2, seq_len=T, ffw=VARIANTS[name], head_dim=32,
                      qk_norm=name == 'sgatlin')
    jax_model = Transformer(cfg, rngs=nnx.Rngs(1))
    params = nnx.state(jax_model, nnx.Param)
    folder = hf.write_hf(tmp_path / 'hf', cfg, params, tokenizer_file, step=0, source='test')
    tokens = np.asarray(jax.random.randint(jax.random.key(2), (2, T), 0, V))
    model, LARGEST[name] = check_model(folder, jax_model, tokens, greedy=name in FFW_KINDS)  # each kind decodes once
    # reloaded and saved again, the weights are bit-identical to the export's
    model.save_pretrained(tmp_path / 'again')
    first, again = load_file(folder / 'model.safetensors'), load_file(tmp_path / 'again' / 'model.safetensors')
    assert sorted(first) == sorted(again) == sorted(hf.torch_name('.'.join(map(str, p))) for p, _ in nnx.to_flat_state(params))
    for k in first: assert first[k].dtype == torch.float32 and torch.equal(first[k], again[k]), k


def test_the_reference_model_through_the_command(tmp_path, data_dir):
    "`sgatlin export --hf` on the committed reference model; greedy `generate` writes what `sgatlin sample` writes."
    out = tmp_path / 'reference-hf'
    res = run_in_process(['export', '--run', str(REFERENCE_DIR), '--hf', str(out)], data_dir)
    assert res.returncode == 0, res.stderr
    config = json.loads((out / 'config.json').read_text())
    assert config['architectures'] == ['SgatlinForCausalLM'] and config['auto_map']['AutoModelForCausalLM'] == 'modeling_sgatlin.SgatlinForCausalLM'
    cfg, tok, graphdef, params, _ = load_run(REFERENCE_DIR)
    jax_model = nnx.merge(graphdef, params)
    text = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the sun with her dog.'
    ids = np.asarray([tok.encode(text).ids])
    tokenizer = transformers.AutoTokenizer.from_pretrained(out, trust_remote_code=True)
    assert isinstance(tokenizer, transformers.PreTrainedTokenizerFast) and tokenizer(text).input_ids == ids[0].tolist()
    model, LARGEST['reference'] = check_model(out, jax_model, ids, greedy=False)  # greedy: against `sgatlin sample` below
    sampled = run_in_process(['sample', '--run', str(REFERENCE_DIR), '--prompt', 'Once upon a time', '--n-tokens', '40',
                              '--temperature', '0'], data_dir)
    with torch.no_grad():
        written = model.generate(tokenizer('Once upon a time', return_tensors='pt').input_ids, max_new_tokens=40, do_sample=False)
    assert sampled.returncode == 0 and tokenizer.decode(written[0]).strip() == sampled.stdout.strip()
    # bfloat16 on request: half the bytes, the same names
    res = run_in_process(['export', '--run', str(REFERENCE_DIR), '--hf', str(tmp_path / 'bf16'), '--dtype', 'bfloat16'], data_dir)
    assert res.returncode == 0, res.stderr
    halves = load_file(tmp_path / 'bf16' / 'model.safetensors')
    assert {t.dtype for t in halves.values()} == {torch.bfloat16} and sorted(halves) == sorted(load_file(out / 'model.safetensors'))
    print('largest logit differences from JAX:', {k: f'{v:.1e}' for k, v in LARGEST.items()})


def refused(args, data_dir, says):
    res = run_in_process(['export', '--run', str(REFERENCE_DIR), *args], data_dir)
    assert res.returncode == 2 and res.stderr.count('\n') == 1 and res.stderr.startswith('sgatlin export: error: '), res.stderr
    assert says in res.stderr, res.stderr
    return res.stderr


def test_bad_input_is_one_line(tmp_path, data_dir, monkeypatch):
    out = tmp_path / 'hf'
    assert run_in_process(['export', '--run', str(REFERENCE_DIR), '--hf', str(out)], data_dir).returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    refused(['--hf', str(out)], data_dir, 'already exists: pass --overwrite')
    (tmp_path / 'mine').mkdir(); (tmp_path / 'mine' / 'notes.txt').write_text('keep')
    refused(['--hf', str(tmp_path / 'mine'), '--overwrite'], data_dir, 'was not written by `export --hf`')
    assert (tmp_path / 'mine' / 'notes.txt').read_text() == 'keep'
    refused(['--hf', str(tmp_path / 'x'), '--out', str(tmp_path / 'y')], data_dir, '--out and --hf name two different exports')
    monkeypatch.setattr(hf, 'HF_KINDS', ('mlp',))
    refused(['--hf', str(tmp_path / 'kind')], data_dir, "feedforward kind 'sgatlin', which the export's torch code does not have")
    monkeypatch.undo()
    monkeypatch.setattr(hf.importlib.metadata, 'version', lambda name: '4.57.1' if name == 'transformers' else '0')
    refused(['--hf', str(tmp_path / 'old')], data_dir, 'transformers 4.57.1 is installed')
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing refused touched the export
    assert run_in_process(['export', '--run', str(REFERENCE_DIR), '--hf', str(out), '--overwrite'], data_dir).returncode == 0
    assert not list(tmp_path.glob('.hf.*'))  # no partial or old folder left beside it
    # the folder itself refuses another transformers version when loaded, in one line
    config = json.loads((out / 'config.json').read_text())
    (out / 'config.json').write_text(json.dumps({**config, 'transformers_range': ['4', '5']}))
    with pytest.raises(ImportError, match=r"tested with transformers >=4,<5, and transformers 5\.\S+ is installed: pip install"):
        transformers.AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True)


def test_lm_eval_scores_the_export_as_it_scores_the_run(tmp_path, monkeypatch):
    "lm-evaluation-harness by name: `hf` on the export and `sgatlin` on the run give the same per-item log-likelihoods."
    monkeypatch.setenv('HF_DATASETS_OFFLINE', '1')  # the harness reads our JSON task files through `datasets`, never the hub
    monkeypatch.setenv('HF_DATASETS_CACHE', str(tmp_path / 'datasets'))
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager
    from sgatlin_nb.tasks import harness_tasks
    out = hf.export_hf(REFERENCE_DIR, tmp_path / 'reference-hf')
    tasks = harness_tasks(tmp_path / 'tasks', ['hellaswag'], limit=12)
    results = {}
    for model, args in (('sgatlin', f'run={REFERENCE_DIR},batch_size=48'),  # the run's tokenizer puts <|endoftext|> first ...
                        ('hf', f'pretrained={out},trust_remote_code=True,add_bos_token=True,batch_size=48')):  # ... as this BOS does
        results[model] = simple_evaluate(model=model, model_args=args, tasks=tasks, log_samples=True, device='cpu',
                                         task_manager=TaskManager(include_path=str(tmp_path / 'tasks')))
    ours, theirs = ([s['resps'] for s in sorted(results[m]['samples']['sgatlin_hellaswag'], key=lambda s: s['doc_id'])]
                    for m in ('sgatlin', 'hf'))
    pairs = [(a[0], b[0]) for x, y in zip(ours, theirs) for a, b in zip(x, y)]
    assert len(ours) == 12 and len(pairs) == 48
    largest = max(abs(a[0] - b[0]) for a, b in pairs)
    assert largest < 1e-4 and [a[1] for a, _ in pairs] == [b[1] for _, b in pairs], largest
    for metric in ('acc,none', 'acc_norm,none'):
        assert results['sgatlin']['results']['sgatlin_hellaswag'][metric] == results['hf']['results']['sgatlin_hellaswag'][metric]
    print(f'lm_eval: largest per-item log-likelihood difference {largest:.1e}')


def hf_streams(model, tokens_BxT, patch=None):
    "Logits, each layer's gate output and residual stream (before, between and after attention and feedforward) of the torch model; `patch`: `(layer, position, (scores, indices))` written into that layer's gate output."
    gates, streams, hooks = [], [], []
    for l, block in enumerate(model.model.blocks):
        hooks.append(block.register_forward_pre_hook(lambda m, args: streams.append(('pre', args[0]))))
        hooks.append(block.ffw_norm.register_forward_pre_hook(lambda m, args: streams.append(('mid', args[0]))))
        hooks.append(block.register_forward_hook(lambda m, args, out: streams.append(('post', out))))
        if hasattr(block.ffw, 'gate'):
            def gate_hook(m, args, out, l=l):
                if patch is not None and patch[0] == l:
                    out = tuple(o.clone() for o in out)
                    for o, p in zip(out, patch[2]): o[:, patch[1]] = p[:, patch[1]]
                gates.append(out)
                return out
            hooks.append(block.ffw.gate.register_forward_hook(gate_hook))
    with torch.no_grad(): logits = model(tokens_BxT).logits
    for h in hooks: h.remove()
    return logits, gates, streams


@pytest.mark.parametrize('name', ['reference', 'moe', 'swiglu'])
def test_transformer_lens_bridge(name, tokenizer_file, tmp_path):
    "TransformerLens's bridge, with the adapter of sgatlin_nb's entry point: the transformers model's logits (1e-5), its gates at every layer and position as hook points, its residual streams, and a gate patched through a hook as a torch hook patches it."
    from transformer_lens.factories.architecture_adapter_factory import ArchitectureAdapterFactory
    if name == 'reference': folder = hf.export_hf(REFERENCE_DIR, tmp_path / 'hf')
    else:
        cfg = ModelConfig(vocab_size=V, d_model=D, n_layers=2, seq_len=T, ffw=VARIANTS[name], head_dim=32)
        params = nnx.state(Transformer(cfg, rngs=nnx.Rngs(1)), nnx.Param)
        folder = hf.write_hf(tmp_path / 'hf', cfg, params, tokenizer_file, step=0, source='test')
    bridge = hf.boot_lens(folder)
    assert ArchitectureAdapterFactory._adapters['SgatlinForCausalLM'] is hf.SgatlinAdapter  # loaded through the entry point
    assert type(bridge.adapter) is hf.SgatlinAdapter
    model = load(folder)
    tokens, other = (torch.tensor(np.asarray(jax.random.randint(jax.random.key(s), (2, T), 0, V)), dtype=torch.long) for s in (3, 4))
    logits, gates, streams = hf_streams(model, tokens)
    with torch.no_grad(): lens_logits, cache = bridge.run_with_cache(tokens)
    largest = float((lens_logits - logits).abs().max())
    assert largest <= 1e-5, largest
    n_layers = len(model.model.blocks)
    for l in range(n_layers):
        for where in ('pre', 'mid', 'post'):  # the residual stream's hooks read the tensors the modules they name read
            want = [x for k, x in streams if k == where][l]
            torch.testing.assert_close(cache[f'blocks.{l}.hook_resid_{where}'], want, atol=0, rtol=0)
    gate_hooks = sorted(k for k in bridge.hook_dict if '.gate.' in k)
    if name == 'swiglu':
        assert gates == [] and gate_hooks == []
        return
    assert gate_hooks == sorted(f'blocks.{l}.mlp.gate.hook_{h}' for l in range(n_layers) for h in ('in', 'out', 'scores', 'indices'))
    for l, (scores, indices) in enumerate(gates):
        np.testing.assert_array_equal(cache[f'blocks.{l}.mlp.gate.hook_indices'].numpy(), indices.numpy())
        np.testing.assert_array_equal(cache[f'blocks.{l}.mlp.gate.hook_scores'].numpy(), scores.numpy())
    # one layer's gates at one position replaced by those of other tokens: through TransformerLens's hooks and through torch's
    layer, position = n_layers - 1, T // 2
    _, other_gates, _ = hf_streams(model, other)
    want, _, _ = hf_streams(model, tokens, patch=(layer, position, other_gates[layer]))
    def put(value, hook, source):
        value = value.clone()
        value[:, position] = source[:, position]
        return value
    at = f'blocks.{layer}.mlp.gate'
    with torch.no_grad(): got = bridge.run_with_hooks(tokens, fwd_hooks=[(f'{at}.hook_scores', functools.partial(put, source=other_gates[layer][0])),
                                                                          (f'{at}.hook_indices', functools.partial(put, source=other_gates[layer][1]))])
    moved = float((want - logits).abs().max())
    assert moved > 1e-3 and float((want - logits)[:, :position].abs().max()) == 0, moved  # the patch moves later positions only
    assert float((got - want).abs().max()) <= 1e-5, float((got - want).abs().max())
    print(f'TransformerLens {name}: logits within {largest:.1e} of transformers; patch moves logits by {moved:.2f}, '
          f'TransformerLens patch within {float((got - want).abs().max()):.1e} of the torch hook patch')
