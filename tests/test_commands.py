"""Every `sgatlin` command, run as a user types it, and every `sgatlin` line the README and the docs show.

The commands run as subprocesses, in the order a user would: each command's own help example (`EXAMPLES` in
sgatlin_nb/cli.py, so the examples are tested too) in one working folder, on one `test-tiny` run trained by
the `train` example. `WRITES` says what each command must leave behind; a command added to the CLI without an
entry there fails `test_every_command_is_covered`.
"""
import json
import re
import shlex
from pathlib import Path

import pytest

from conftest import ROOT, run_sgatlin
from sgatlin_nb.cli import COMMANDS, EXAMPLES, _renamed, command_parser

# command: (extra arguments after its example, files it must write relative to the working folder)
WRITES = {
    'train': ([], ['runs/try/run.json', 'runs/try/metrics.jsonl', 'runs/try/checkpoints/30', 'runs/try/checksums/30.json']),
    'eval': ([], []),
    'sample': ([], []),
    'runs': ([], []),
    'record': (['--quiet'], ['runs/try/circuits/manifest.json', 'runs/try/circuits/tokens.parquet',
                            'runs/try/circuits/gates_layer0.parquet']),
    'neighbours': (['--quiet'], ['runs/try/neighbours/neighbours.csv', 'runs/try/neighbours/neighbours.html',
                                'runs/try/neighbours/neighbours.png']),
    'map': (['--quiet'], [f'runs/try/map/{f}' for f in ('map.html', 'map.png', 'points.csv', 'purity.csv')]),
    'patch': ([], [f'runs/try/patching/{f}' for f in ('pairs.csv', 'per_pair.csv', 'nie.csv', 'nie.png', 'nie.html')]),
    'usage': ([], ['runs/try/usage/summary.json']),
    'demo': (['--config', 'test-tiny', '--steps', '20', '--n-stories', '12', '--quiet'],
             ['runs/demo/report.html', 'runs/demo/summary.json', 'runs/demo/run/run.json']),
    'submit': (['--out', 'slurm'], []),
    'status': ([], []),
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


@pytest.mark.parametrize("name", ORDER)
def test_command_example_runs_and_writes(name, workdir, data_dir):
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
    res = run_sgatlin(args, None if offline else data_dir, cwd=cwd, timeout=900,
                      extra_env={"HF_HUB_OFFLINE": "1"} if offline else None)
    assert res.returncode == 0, (args, res.stdout[-2000:], res.stderr[-3000:])
    assert "Traceback" not in res.stderr
    for f in WRITES[name][1]:
        assert (workdir / f).exists(), f"`{' '.join(args)}` did not write {f}"
    if name == 'train':
        assert json.loads(res.stdout[:res.stdout.index('\nsample:')])['step'] == 30
    if name == 'eval':
        out = json.loads(res.stdout)
        assert out['step'] == 30 and out['eval_tokens'] > 0 and out['eval_ppl'] < out['unigram_ppl'] * 5
    if name == 'sample':
        assert res.stdout.startswith('Once upon a time') and len(res.stdout.split()) > 6
    if name == 'runs':
        assert re.search(r'^runs/try +tinystories +sgatlin .* 30 +30 ', res.stdout, re.M), res.stdout
    if name == 'record':
        assert json.loads((workdir / 'runs/try/circuits/manifest.json').read_text())['counts']['documents'] == 32
    if name == 'demo':
        assert json.loads((workdir / 'runs/demo/summary.json').read_text())['numbers']['eval_ppl'] > 1
    if name == 'submit':
        assert '#SBATCH --array=0-1' in res.stdout
    if name == 'status':
        assert res.stdout.startswith('task 0: COMPLETED'), res.stdout


@pytest.mark.parametrize("name", ORDER)
def test_help_shows_an_example(name, data_dir):
    res = run_sgatlin([name, '--help'], data_dir)
    assert res.returncode == 0 and f"example: {EXAMPLES[name]}" in ' '.join(res.stdout.split()), res.stdout[-1500:]


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
                except ValueError:
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
        res = run_sgatlin(argv, None, cwd=tmp_path, extra_env={"HF_HUB_OFFLINE": "1"})
        assert res.returncode == 0, (argv, res.stderr[-2000:])
