"""Every `sgatlin` command, run as a user types it, and every `sgatlin` line the README and the docs show.

The commands run as subprocesses, in the order a user would: each command's own help example (`EXAMPLES` in
sgatlin_nb/cli.py, so the examples are tested too) in one working folder, on one `test-tiny` run trained by
the `train` example. `WRITES` says what each command must leave behind; a command added to the CLI without an
entry there fails `test_every_command_is_covered`. The commands' options follow, mostly called in this process
(`main([...])`, which saves each a start-up), on the same run.
"""
import json
import math
import re
import shlex
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT, run_sgatlin, snapshot
from sgatlin_nb.cli import COMMANDS, EXAMPLES, _renamed, command_parser, main

# command: (extra arguments after its example, files it must write relative to the working folder)
WRITES = {
    'train': ([], ['runs/try/run.json', 'runs/try/metrics.jsonl', 'runs/try/checkpoints/30', 'runs/try/checksums/30.json']),
    'config': (['lr=3e-3'], []),
    'eval': ([], []),
    'sample': ([], []),
    'export': ([], ['runs/try-export/model.safetensors', 'runs/try-export/config.json', 'runs/try-export/tokenizer.json']),
    'runs': ([], []),
    'record': (['--quiet'], ['runs/try/circuits/manifest.json', 'runs/try/circuits/tokens.parquet',
                            'runs/try/circuits/gates_layer0.parquet']),
    'neighbours': (['--quiet'], ['runs/try/neighbours/neighbours.csv', 'runs/try/neighbours/neighbours.html',
                                'runs/try/neighbours/neighbours.png']),
    'map': (['--quiet'], [f'runs/try/map/{f}' for f in ('map.html', 'map.png', 'points.csv', 'purity.csv')]),
    'pages': (['--quiet'], ['runs/try/pages/index.html', 'runs/try/pages/site.json', 'runs/try/pages/graphs/0/graph.html']),
    'neuron': (['--quiet'], ['runs/try/neuron.html']),
    'graph': (['--prune', 'none'], ['runs/try/graph/graph.json', 'runs/try/graph/graph.html']),
    'patch': ([], [f'runs/try/patching/{f}' for f in ('pairs.csv', 'per_pair.csv', 'nie.csv', 'nie.png', 'nie.html')]),
    'usage': ([], ['runs/try/usage/summary.json']),
    'demo': (['--config', 'test-tiny', '--steps', '20', '--n-stories', '12', '--quiet'],
             ['runs/demo/report.html', 'runs/demo/summary.json', 'runs/demo/run/run.json']),
    'submit': (['--out', 'slurm'], []),
    'status': ([], []),
    'kernel': (['--prefix', 'jupyter'], ['jupyter/share/jupyter/kernels/sgatlin_nb/kernel.json']),  # a scratch prefix, not the user's folder
}
ORDER = list(WRITES)


def test_every_command_is_covered():
    assert set(WRITES) == set(COMMANDS), f"commands without an end-to-end test: {set(COMMANDS) - set(WRITES)}"
    assert set(EXAMPLES) == set(COMMANDS)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("cli")


def _example(name: str) -> list[str]:
    argv = shlex.split(EXAMPLES[name])
    assert argv[:2] == ['sgatlin', name], EXAMPLES[name]
    return argv[1:] + WRITES[name][0]


MADE_BY = {'train': 'runs/try/checkpoints/30', 'record': 'runs/try/circuits/manifest.json'}  # what later examples read


def _examples_read_by(name: str, workdir: Path, data_dir):
    "Run the `train` and `record` examples first where `name` comes after them and they have not run (a test run alone)."
    for before, made in MADE_BY.items():
        if ORDER.index(before) < ORDER.index(name) and not (workdir / made).exists():
            res = run_sgatlin(_example(before), data_dir, cwd=workdir)
            assert res.returncode == 0, res.stderr[-2000:]


def _start_afresh(name: str, workdir: Path):
    """In another order (a shuffled suite) a later example may have run this one already, as its prerequisite: remove
    what it made, so the example runs as written, into a folder that does not hold its output yet."""
    made = {'train': 'runs/try', 'record': 'runs/try/circuits'}.get(name)
    if made and (workdir / made).exists():
        shutil.rmtree(workdir / made)


@pytest.mark.parametrize("name", ORDER)
def test_command_example_runs_and_writes(name, workdir, data_dir):
    _start_afresh(name, workdir)
    _examples_read_by(name, workdir, data_dir)
    cwd = ROOT if name == 'submit' else workdir  # submit's example names a notebook of the repository
    args = _example(name)
    if name == 'submit':
        args[args.index('--out') + 1] = str(workdir / 'slurm')
    if name == 'status':  # the run folder `sgatlin submit --run-dir slurm/iso` leaves once its one task is done
        (workdir / 'slurm' / 'iso' / '0').mkdir(parents=True)
        (workdir / 'slurm' / 'iso' / '0' / 'done').touch()
        (workdir / 'slurm' / 'iso' / 'submission.json').write_text(json.dumps(
            {'notebook': 'x.ipynb', 'tasks': [{}], 'jobs': [{'job': '987654321', 'tasks': [0], 'array': False}]}))
    # eval and sample read only the run: no data folder and no network, as in a new shell
    offline = name in ('eval', 'sample')
    res = run_sgatlin(args, "" if offline else data_dir, cwd=cwd, timeout=900,
                      extra_env={"HF_HUB_OFFLINE": "1"} if offline else None)
    assert res.returncode == 0, (args, res.stdout[-2000:], res.stderr[-3000:])
    assert "Traceback" not in res.stderr
    for f in WRITES[name][1]:
        assert (workdir / f).exists(), f"`{' '.join(args)}` did not write {f}"
    if name == 'train':
        assert json.loads(res.stdout[:res.stdout.index('\nsample:')])['step'] == 30
    if name == 'config':  # the YAML of test-tiny with a SwiGLU feedforward, as `--config FILE.yaml` reads it back
        from sgatlin_nb.configs import make_config
        (workdir / 'swiglu.yaml').write_text(res.stdout)
        cfg = make_config(workdir / 'swiglu.yaml')
        assert (cfg.model.ffw.kind, cfg.model.ffw.d_ffw, cfg.lr) == ('swiglu', 128, 3e-3)
        assert cfg == make_config('test-tiny', ['model.ffw.kind=swiglu', 'model.ffw.d_ffw=128', 'lr=3e-3'])
    if name == 'eval':
        out = json.loads(res.stdout)
        assert out['step'] == 30 and out['eval_tokens'] > 0
        # the same checkpoint on the same held-out tokens as the training run's own evaluation at step 30
        logged = [r for r in map(json.loads, (workdir / 'runs/try/metrics.jsonl').read_text().splitlines()) if 'eval_loss' in r]
        assert logged[-1]['step'] == 30 and abs(out['eval_loss'] - logged[-1]['eval_loss']) < 1e-5, (out, logged[-1])
        assert abs(math.log(out['eval_ppl']) - out['eval_loss']) < 1e-9 and out['unigram_ppl'] > 1
    if name == 'sample':
        assert res.stdout.startswith('Once upon a time') and len(res.stdout.split()) > 6
    if name == 'runs':
        assert re.search(r'^runs/try +tinystories +sgatlin .* 30 +30 ', res.stdout, re.M), res.stdout
    if name == 'record':
        assert json.loads((workdir / 'runs/try/circuits/manifest.json').read_text())['counts']['documents'] == 32
    if name == 'demo':
        numbers = json.loads((workdir / 'runs/demo/summary.json').read_text())['numbers']
        vocab = json.loads((workdir / 'runs/demo/run/run.json').read_text())['config']['model']['vocab_size']
        assert abs(math.log(numbers['eval_ppl']) - numbers['eval_loss']) < 1e-9
        assert numbers['eval_ppl'] < vocab, numbers  # 20 steps already beat a uniform guess over the vocabulary
    if name == 'pages':  # 4 neurons of the one layer, each a page the index links to
        site = json.loads((workdir / 'runs/try/pages/site.json').read_text())
        layer = (workdir / 'runs/try/pages/layer1.html').read_text()
        neurons = sorted((workdir / 'runs/try/pages/neurons').glob('*.html'))
        assert site['neuron_pages'] == len(neurons) == 4 and all(p.name in layer for p in neurons), (site, neurons)
        assert site['circuit_pages'] == len(list((workdir / 'runs/try/pages/circuits').glob('*.html'))) >= 1, site
    if name == 'neuron':
        assert 'channel 1' in (workdir / 'runs/try/neuron.html').read_text()
    if name == 'submit':
        assert '#SBATCH --array=0-1' in res.stdout
    if name == 'status':
        assert res.stdout.startswith('task 0: COMPLETED'), res.stdout


# ---- options of the commands, mostly in this process (`main([...])`: no start-up cost), on the run trained above ----

@pytest.fixture
def try_run(workdir, data_dir, monkeypatch):
    "The working folder, the current one, with the `train` example's run and the `record` example's database."
    _examples_read_by('status', workdir, data_dir)  # this test run alone: the examples it reads run first
    monkeypatch.chdir(workdir)
    monkeypatch.setenv('SGATLIN_DATA_DIR', str(data_dir))
    return workdir


def _one_error_line(capsys, command: str) -> str:
    "What the command wrote to stderr, checked to be one `sgatlin COMMAND: error: ...` line."
    err = capsys.readouterr().err
    assert err.startswith(f'sgatlin {command}: error: ') and err.count('\n') == 1, err
    return err


def test_map_layers_channels_by(try_run, tmp_path, capsys):
    from sgatlin_nb.embedding import write_map
    argv = ['map', '--db', 'runs/try/circuits', '--n-top', '20', '--n-epochs', '5', '--quiet']
    assert main(argv + ['--out', str(tmp_path / 'cli'), '--layers', '-1', '--channels', '1', '--by', 'colour']) == 0
    points, purity = pd.read_csv(tmp_path / 'cli/points.csv'), pd.read_csv(tmp_path / 'cli/purity.csv')
    assert [c for c in points.columns if c[0] in 'xy'] == ['x1', 'y1'] and set(purity.layer) == {1}  # -1: the last layer
    # the same files as the library's for layer 0 and channel 1 of the database, and not those of all channels
    lib = {name: write_map('runs/try/circuits', tmp_path / name, n_top=20, layers=[0], channels=ch, n_epochs=5,
                           png=False, progress=False) for name, ch in (('one', [1]), ('all', None))}
    for name in ('points', 'purity'):
        assert (tmp_path / f'cli/{name}.csv').read_text() == lib['one'][name].read_text(), name
    assert (tmp_path / 'cli/purity.csv').read_text() != lib['all']['purity'].read_text()
    html = (tmp_path / 'cli/map.html').read_text()
    assert '"field": "colour"' in html and '"title": "input token"' in html and '"title": "token group"' not in html
    # bad lists and values: one line, status 2
    for option, value, message in [('--layers', '1,x', "--layers takes integers separated by commas, e.g. 1,2; got '1,x'"),
                                   ('--channels', '0,y', "--channels takes integers separated by commas"),
                                   ('--layers', '2', "--layers 2: this model's layers are 1 to 1"),
                                   ('--channels', '2', "channels must be a subset of range(2), got [2]")]:
        assert main(argv + ['--out', str(tmp_path / 'bad'), option, value]) == 2, (option, value)
        assert message in _one_error_line(capsys, 'map')


def test_export_then_sample_the_folder_as_the_run(try_run, tmp_path, capsys):
    "`sgatlin export` writes a model folder that `sample --run` reads as it reads the run: the same greedy text."
    out = tmp_path / 'exported'
    assert main(['export', '--run', 'runs/try', '--out', str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ['config.json', 'model.safetensors', 'tokenizer.json']
    capsys.readouterr()
    greedy = ['--prompt', 'Once upon a time', '--n-tokens', '20', '--temperature', '0']
    assert main(['sample', '--run', 'runs/try'] + greedy) == 0
    from_run = capsys.readouterr().out
    assert main(['sample', '--run', str(out)] + greedy) == 0
    assert capsys.readouterr().out == from_run and from_run.startswith('Once upon a time')
    assert len(from_run) > len('Once upon a time\n')  # something was generated
    from sgatlin_nb.intervention import training_corpus  # `patch` finds the training corpus of a folder as of its run
    assert training_corpus(out) == training_corpus('runs/try')
    assert main(['export', '--run', 'runs/try', '--out', str(out)]) == 2
    assert 'is not empty' in _one_error_line(capsys, 'export')
    assert main(['export', '--run', 'runs', '--out', str(tmp_path / 'none')]) == 2
    assert 'holds no sgatlin run' in _one_error_line(capsys, 'export') and not (tmp_path / 'none').exists()


def test_record_all_documents_max_len_overwrite(try_run, tmp_path, capsys):
    from tokenizers import Tokenizer
    from sgatlin_nb.record import CircuitDB
    from sgatlin_nb.configs import PRESETS
    stories = ["Tom had a red ball. He liked to play with it in the park every day.", "The end.",
               "The cat sat on the mat.", "Lily went to the shop to buy some milk and bread for her mum.", "Bye."]
    corpus = tmp_path / 'stories.txt'
    corpus.write_text('\n<|endoftext|>\n'.join(stories) + '\n')
    tok = Tokenizer.from_file(str(try_run / 'runs/try/tokenizer.json'))
    full = [1 + len(tok.encode(s, add_special_tokens=False).ids) for s in stories]  # end-of-text first
    assert min(full) < 8 < max(full) and 8 in full  # shorter, longer and exactly as long as --max-len
    out, argv = tmp_path / 'db', ['record', '--run', 'runs/try', '--data', str(corpus), '--quiet']
    assert main(argv + ['--out', str(out), '--n-docs', '0', '--max-len', '8']) == 0
    db = CircuitDB(out)
    assert db.documents.text.tolist() == stories  # 0: every document, in order
    assert db.documents.n_tokens.tolist() == [min(n, 8) for n in full]
    assert db.documents.truncated.tolist() == [n > 8 for n in full]
    assert db.manifest['counts'] == {'documents': len(stories), 'tokens': sum(min(n, 8) for n in full),
                                     'truncated_documents': sum(n > 8 for n in full)}
    assert db.tokens.groupby('doc_id').pos.max().tolist() == [min(n, 8) - 1 for n in full]
    # a database already there: refused, and left as it was; --overwrite replaces it
    before = snapshot(out)
    assert main(argv + ['--out', str(out), '--n-docs', '2']) == 2
    assert 'already holds a circuit database' in _one_error_line(capsys, 'record')
    assert snapshot(out) == before
    assert main(argv + ['--out', str(out), '--n-docs', '2', '--overwrite']) == 0
    db = CircuitDB(out)
    seq_len = PRESETS['test-tiny'].model.seq_len  # --max-len's default
    assert db.manifest['counts']['documents'] == 2 and db.manifest['recording']['max_len'] == seq_len
    picked = [stories.index(t) for t in db.documents.text]
    assert picked == sorted(picked) and db.documents.n_tokens.tolist() == [min(full[i], seq_len) for i in picked]


def test_neighbours_of_the_reference_model(data_dir, tmp_path, monkeypatch):
    from sgatlin_nb.record import reference_circuit_db
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('SGATLIN_DATA_DIR', str(data_dir))
    assert main(['neighbours', 'Once upon a time, the little dog was happy.', '--focus', 'little dog', '--k', '3',
                 '--width', '2', '--quiet']) == 0
    db = reference_circuit_db(progress=False)  # the default database: 128 held-out stories, on the reference model
    table = pd.read_csv(tmp_path / 'neighbours/neighbours.csv', keep_default_na=False)  # --out's default
    assert table.token.str.strip().unique().tolist() == ['little', 'dog']  # only the focus
    assert table.groupby('pos')['rank'].apply(list).tolist() == [[1, 2, 3]] * 2  # --k 3 each
    rows = table.row.tolist()
    assert table.neighbour.tolist() == db.tokens.token_str.iloc[rows].tolist()
    assert table.context.tolist() == [db.context(r, 2) for r in rows]  # --width 2
    assert table.context.tolist() != [db.context(r, 8) for r in rows]
    title = f'layer {db.n_layers - 1} of {db.n_layers}: nearest circuits in {db.manifest["dataset"]["name"]}'
    assert db.n_layers == 4 and title in (tmp_path / 'neighbours/neighbours.html').read_text()  # -2: the penultimate


def test_patch_nouns_corpus_parser(try_run, tmp_path, monkeypatch, capsys):
    from sgatlin_nb.intervention import PAPER_NOUNS
    argv = ['patch', '--run', 'runs/try', '--n-boot', '20']
    # the paper's nouns: no corpus read, not even one that does not exist
    assert main(argv + ['--out', str(tmp_path / 'paper'), '--nouns', 'paper', '--corpus', str(tmp_path / 'none.txt')]) == 0
    pairs = pd.read_csv(tmp_path / 'paper/pairs.csv')
    assert dict(zip(pairs.noun, pairs.adjective)) == PAPER_NOUNS and set(pairs['count']) == {0}
    assert set(pd.read_csv(tmp_path / 'paper/nie.csv').nouns) == {'paper'}
    assert len(pd.read_csv(tmp_path / 'paper/per_pair.csv')) == 8 * 7
    # pairs mined from a given corpus, by the regular expression: not '-ing' words, not 'very ...', not once-seen pairs
    mined = {'dog': 'happy', 'cat': 'sad', 'bird': 'small', 'girl': 'kind', 'boy': 'tall', 'tree': 'green', 'car': 'fast',
             'sky': 'blue'}
    text = [f"The {n} was {a}." for n, a in mined.items()] * 2 + ["The dog was happy."]
    text += ["The sun was shining."] * 3 + ["The box was very big."] * 3 + ["The cup was red."]
    corpus = tmp_path / 'corpus.txt'
    corpus.write_text(' '.join(text))
    assert main(argv + ['--out', str(tmp_path / 'mined'), '--corpus', str(corpus), '--parser', 'regex']) == 0
    pairs = pd.read_csv(tmp_path / 'mined/pairs.csv')
    want = {(n, a, 3 if n == 'dog' else 2) for n, a in mined.items()}
    assert set(pairs.itertuples(index=False, name=None)) == want
    assert set(pd.read_csv(tmp_path / 'mined/nie.csv').nouns) == {'stories'}
    # --parser spacy without spaCy: one line that says what to install, status 2
    monkeypatch.setitem(sys.modules, 'spacy', None)  # `import spacy` fails, as when it is not installed
    assert main(argv + ['--out', str(tmp_path / 'spacy'), '--corpus', str(corpus), '--parser', 'spacy']) == 2
    err = _one_error_line(capsys, 'patch')
    assert 'pip install spacy' in err and "parser='regex'" in err
    assert not (tmp_path / 'spacy').exists()
    # --site: the feedforward output instead of the gates, on the paper's nouns; a site that does not exist is one line
    assert main(argv + ['--out', str(tmp_path / 'ffw'), '--nouns', 'paper', '--site', 'ffw_out']) == 0
    ffw = pd.read_csv(tmp_path / 'ffw/nie.csv')
    assert set(ffw.site) == {'ffw_out'} and set(pd.read_csv(tmp_path / 'paper/nie.csv').site) == {'gates'}
    assert main(argv + ['--out', str(tmp_path / 'nowhere'), '--nouns', 'paper', '--site', 'mlp_out']) == 2
    err = _one_error_line(capsys, 'patch')
    assert "site must be one of ['resid_pre', 'attn_out', 'gates', 'ffw_out', 'resid_post']" in err, err


def test_usage_layer_channel(try_run, tmp_path, capsys):
    from sgatlin_nb.record import CircuitDB
    from sgatlin_nb.usage import coactivation
    db = CircuitDB('runs/try/circuits')  # the `record` example: 32 random held-out stories, seed 0, as `usage` draws them
    argv = ['usage', '--run', 'runs/try', '--n-stories', str(db.manifest['counts']['documents']), '--n-neurons', '64']
    assert main(argv + ['--out', str(tmp_path / 'u'), '--layer', '1', '--channel', '1']) == 0
    summary = json.loads((tmp_path / 'u/summary.json').read_text())
    assert (summary['coactivation layer'], summary['coactivation channel']) == (1, 1)  # numbered from 1, as the pages do
    # the figure's matrix is channel 1's, as counted from the database's gates, and not channel 0's
    shown = pd.read_csv(tmp_path / 'u/coactivation.csv', index_col=0).to_numpy()
    want = {c: coactivation(db.gates(0)[0], db.d_ffw, range(64), c).conditional for c in (0, 1)}
    assert np.allclose(shown, want[1], equal_nan=True) and not np.allclose(shown, want[0], equal_nan=True)
    for option, value, message in [('--layer', '2', "--layer 2: this model's layers are 1 to 1"),
                                   ('--layer', '0', '--layer numbers layers from 1'),
                                   ('--channel', '2', 'channel must be in [0, 2), got 2')]:
        assert main(argv + ['--out', str(tmp_path / 'bad'), option, value]) == 2
        assert message in _one_error_line(capsys, 'usage')


def test_step_seed_and_size_options(try_run, tmp_path, capsys):
    """--step, --seed and the size options each change what a command reads or writes: sample, export, record, usage,
    neuron and pages, on the `train` example's run (checkpoints 10, 20 and 30)."""
    from sgatlin_nb.record import CircuitDB
    from sgatlin_nb.runs import exported
    def out(argv):
        assert main(argv) == 0, argv
        return capsys.readouterr().out
    base = ['sample', '--run', 'runs/try', '--n-tokens', '12']
    latest, at20 = out(base + ['--seed', '1']), out(base + ['--seed', '1', '--step', '20'])
    assert latest == out(base + ['--seed', '1']) and at20 != latest  # the same seed repeats; another step differs
    assert out(base + ['--seed', '2']) != latest
    for name, extra in (('x20', ['--dtype', 'bfloat16']), ('x20f', [])):
        assert main(['export', '--run', 'runs/try', '--out', str(tmp_path / name), '--step', '20', *extra]) == 0
    size = lambda name: (tmp_path / name / 'model.safetensors').stat().st_size
    assert exported(tmp_path / 'x20')['step'] == 20 and size('x20') < 0.6 * size('x20f')  # bfloat16: half the bytes
    rec = ['record', '--run', 'runs/try', '--n-docs', '6', '--quiet']
    out(rec + ['--out', str(tmp_path / 'a'), '--seed', '1', '--step', '20', '--batch-size', '4'])
    out(rec + ['--out', str(tmp_path / 'b'), '--seed', '2'])
    a, b = CircuitDB(tmp_path / 'a'), CircuitDB(tmp_path / 'b')
    assert (a.manifest['checkpoint_step'], b.manifest['checkpoint_step']) == (20, 30)
    assert a.documents.text.tolist() != b.documents.text.tolist()  # another seed, other stories
    use = ['usage', '--run', 'runs/try', '--n-stories', '6', '--n-neurons', '16']
    for d, extra in (('u1', ['--seed', '1', '--step', '20']), ('u2', ['--seed', '2', '--step', '20']), ('u3', ['--seed', '1'])):
        out(use + ['--out', str(tmp_path / d), *extra])
    steps = [json.loads((tmp_path / f'{d}/summary.json').read_text())['step'] for d in ('u1', 'u2', 'u3')]
    table = lambda d: (tmp_path / d / 'coactivation.csv').read_text()
    assert steps == [20, 20, 30] and table('u1') != table('u2') and table('u1') != table('u3')  # the seed and the step count
    top = int(np.bincount(CircuitDB('runs/try/circuits').gates(0)[0][:, 1].ravel()).argmax())  # channel 1's most-firing neuron
    neuron = ['neuron', '--run', 'runs/try', '--db', 'runs/try/circuits', '--layer', '1', '--channel', '1', '--neuron', str(top), '--quiet']
    out(neuron + ['--out', str(tmp_path / 'n3.html'), '--contexts', '3', '--width', '2'])
    out(neuron + ['--out', str(tmp_path / 'n6.html'), '--contexts', '6', '--width', '5'])
    n3, n6 = ((tmp_path / f).read_text() for f in ('n3.html', 'n6.html'))
    shown = lambda html: int(re.search(r'The (\d+) recorded tokens with the largest gate score', html).group(1))
    assert (shown(n3), shown(n6)) == (3, 6) and n3 != n6  # --contexts; --width changes the contexts' text
    assert main(neuron[:5] + ['--neuron', str(top), '--out', str(tmp_path / 'n.html')]) == 2  # no --layer, no --channel
    assert 'name the neuron: --layer, --channel' in _one_error_line(capsys, 'neuron')
    pages = ['pages', '--run', 'runs/try', '--db', 'runs/try/circuits', '--quiet', '--out', str(tmp_path / 'site')]
    out(pages + ['--per-layer', '0', '--max-circuits', '2', '--width', '3'])
    site = json.loads((tmp_path / 'site/site.json').read_text())
    idx = CircuitDB('runs/try/circuits').gates(0)[0]  # [tokens, channels, k]; the run has one layer
    fired = {(c, int(i)) for c in range(idx.shape[1]) for i in np.unique(idx[:, c])}
    assert site['neuron_pages'] == len(fired) and site['circuit_pages'] == 2, site  # 0: every neuron that fires
    assert main(pages + ['--per-layer', '2']) == 2 and 'is not empty' in _one_error_line(capsys, 'pages')
    out(pages + ['--per-layer', '2', '--overwrite'])
    assert json.loads((tmp_path / 'site/site.json').read_text())['neuron_pages'] == 2
    assert main(['status', str(tmp_path)]) == 2 and 'holds no submission (submission.json)' in _one_error_line(capsys, 'status')


def test_train_fsdp_batch_size_from_the_shell(tmp_path, data_dir):
    from sgatlin_nb.configs import PRESETS
    res = run_sgatlin(['train', '--config', 'test-tiny', '--out', 'runs/fsdp', '--steps', '2', '--batch-size', '4',
                       '--fsdp', '--profile', '1:2', '--quiet'], data_dir, cwd=tmp_path,
                      extra_env={'XLA_FLAGS': '--xla_force_host_platform_device_count=2'})
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / 'runs/fsdp'
    cfg = json.loads((run / 'run.json').read_text())['config']
    assert (cfg['batch_size'], cfg['fsdp'], cfg['steps']) == (4, True, 2)
    metrics = [json.loads(line) for line in (run / 'metrics.jsonl').read_text().splitlines()]
    steps = [m for m in metrics if 'loss' in m]
    assert [m['step'] for m in steps] == [1, 2] and all(math.isfinite(m['loss']) for m in steps)
    assert steps[-1]['tokens'] == 2 * 4 * PRESETS['test-tiny'].model.seq_len  # steps × --batch-size × seq_len
    assert [m['step'] for m in metrics if 'eval_ppl' in m] == [2]
    assert all(m['flops_per_s'] > 0 and 'mfu' not in m for m in steps)  # FLOP/s in every step record; no MFU on a CPU
    # --profile 1:2 traced the second step: a TensorBoard profile and a Perfetto trace in the run
    traces = list((run / 'profile' / 'plugins' / 'profile').glob('*/'))
    assert len(traces) == 1 and list(traces[0].glob('*.xplane.pb')) and (traces[0] / 'perfetto_trace.json.gz').stat().st_size > 0
    # Orbax's record of the checkpoint's layout: every array on the two devices, parameters split between them
    shardings = [json.loads(s) for s in json.loads((run / 'checkpoints/2/default/_sharding').read_text()).values()]
    assert all(len(s['device_mesh']['mesh']) == 2 for s in shardings)
    assert any('data' in s['partition_spec'] for s in shardings)


def test_train_wandb_without_the_extra_writes_nothing(tmp_path, capsys, monkeypatch):
    "Without the wandb package, `--wandb` is refused before the run folder, its token files or run.json exist."
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    assert main(["train", "--config", "test-tiny", "--out", str(tmp_path / "run"), "--wandb", "proj", "--quiet"]) == 2
    assert "--wandb needs the wandb package" in _one_error_line(capsys, "train")
    assert not (tmp_path / "run").exists()


def test_runs_on_an_empty_folder(tmp_path, capsys):
    assert main(['runs', '--root', str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"no sgatlin runs under {tmp_path}\n"


@pytest.mark.parametrize("name", ORDER)
def test_help_shows_an_example(name, capfd):
    """In this process (`main`, as the console script calls it; file descriptors captured): `sgatlin --help` below runs
    the console script itself."""
    with pytest.raises(SystemExit) as stop:
        main([name, '--help'])
    out = capfd.readouterr().out
    assert stop.value.code == 0 and f"example: {EXAMPLES[name]}" in ' '.join(out.split()), out[-1500:]


def test_top_level_help():
    res = run_sgatlin(['--help'], None)
    assert res.returncode == 0 and 'example: sgatlin' in res.stdout
    assert all(f"  {name} " in res.stdout for name in COMMANDS)
    res = run_sgatlin(['no-such-command'], None)
    assert res.returncode == 2


# ---- the commands the README and the documentation pages show ----

def _shown_texts() -> list[tuple[str, str]]:
    "README.md, and the markdown of every notebook (the pages of the site)."
    texts = [('README.md', (ROOT / 'README.md').read_text())]
    for nb in sorted((ROOT / 'nbs').glob('*.ipynb')):
        cells = json.loads(nb.read_text())['cells']
        texts.append((nb.name, '\n'.join(''.join(c['source']) for c in cells if c['cell_type'] == 'markdown')))
    return texts


def shown_commands() -> list[tuple[str, list[str]]]:
    "Every `sgatlin COMMAND ...` invocation inside inline code or a fenced block of the README and the pages."
    found = []
    for where, text in _shown_texts():
        fenced = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
        spans = fenced + re.findall(r"(?<!`)`([^`\n]+)`(?!`)", re.sub(r"```.*?```", "", text, flags=re.S))
        for span in spans:
            for line in span.splitlines():
                try:
                    words = shlex.split(line)
                except ValueError:  # a shown command nobody could paste is a failure, not a line to skip
                    if re.search(r"\bsgatlin\s+[a-z]", line): found.append((where, ['<unparsable>', line]))
                    continue
                for i, w in enumerate(words):
                    if Path(w).name == 'sgatlin' and i + 1 < len(words) and re.fullmatch(r'[a-z]+', words[i + 1]):
                        argv = words[i + 1:]
                        for stop in ('&&', ';', '|', '||', '...'):  # '...': options left out in prose
                            argv = argv[:argv.index(stop)] if stop in argv else argv
                        found.append((where, argv))
    return found


def test_the_docs_show_commands():
    shown = shown_commands()
    assert any(w == 'README.md' and argv[0] == 'demo' for w, argv in shown), shown
    assert {argv[0] for _, argv in shown} >= {'train', 'eval', 'sample', 'demo'}, shown


@pytest.mark.parametrize("where, argv", shown_commands(), ids=lambda v: v if isinstance(v, str) else ' '.join(v)[:60])
def test_shown_command_parses(where, argv):
    assert argv[0] in COMMANDS, f"{where} shows `sgatlin {' '.join(argv)}`, but there is no command {argv[0]!r}"
    if len(argv) == 1:
        return  # the command named in prose, not an invocation
    assert _renamed(argv[0], argv[1:]) is None, f"{where}: {_renamed(argv[0], argv[1:])}"
    try:
        command_parser(argv[0]).parse_args(argv[1:])
    except SystemExit:
        pytest.fail(f"{where} shows `sgatlin {' '.join(argv)}`, which its parser refuses")


def test_readme_eval_and_sample_run_as_shown(workdir, data_dir, tmp_path):
    "The README's `eval` and `sample` lines, verbatim, on the run trained above standing in for runs/demo/run."
    if not (workdir / 'runs' / 'try' / 'checkpoints').exists():  # this test run alone: train the example run first
        assert run_sgatlin(_example('train'), data_dir, cwd=workdir).returncode == 0
    (tmp_path / 'runs' / 'demo').mkdir(parents=True)
    (tmp_path / 'runs' / 'demo' / 'run').symlink_to(workdir / 'runs' / 'try')
    cheap = [argv for w, argv in shown_commands() if w == 'README.md' and argv[0] in ('eval', 'sample')]
    assert {argv[0] for argv in cheap} == {'eval', 'sample'}, cheap
    for argv in cheap:
        res = run_sgatlin(argv, "", cwd=tmp_path, extra_env={"HF_HUB_OFFLINE": "1"})
        assert res.returncode == 0, (argv, res.stderr[-2000:])


def test_train_scan_layers_matches_the_loop(tmp_path):
    "`sgatlin train --scan-layers` (the blocks as one scan) trains the same steps as the loop of blocks, to the last bit."
    from sgatlin_nb.configs import make_config
    from sgatlin_nb.train import train
    cfg = make_config('test-tiny', {'steps': 2})
    losses = {}
    for scan in (False, True):
        train(cfg, 'tinystories', tmp_path / f'scan{scan}', progress=False, scan_layers=scan)
        lines = (tmp_path / f'scan{scan}' / 'metrics.jsonl').read_text().splitlines()
        losses[scan] = [json.loads(line)['loss'] for line in lines if '"loss"' in line]
    assert len(losses[False]) == 2 and losses[True] == losses[False], losses
