"""Issue 67: which commit's code trained the runs of nbs/results/tasks_cpu.json, read from git, into
nbs/results/tasks_cpu_code.json, which the results page compares with today's code.

The results file records each seed's `code_identity` (a hash of the package's source); this finds every commit whose
package hashes to it, checks that they are consecutive in history, and keeps, per identity: those commits, the SHA-256
of each of that code's module files (today's files compare with them, module by module), and the config that code's
CPU protocol gave each run of the file (today's protocol compares with it). The configs come from that commit's
package itself, run in a subprocess from a `git archive` of it.

    python scripts/tasks_code.py   # seconds; needs the repository's history
"""
import hashlib, json, subprocess, sys, tempfile
from pathlib import Path
ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / 'nbs' / 'results'

def git(*args, binary=False):
    out = subprocess.run(['git', *args], cwd=ROOT, capture_output=True, check=True)
    return out.stdout if binary else out.stdout.decode()

def package_files(commit: str) -> dict[str, bytes]:
    "The package's `.py` files at `commit` but nbdev's index, by name, as `code_identity` reads them."
    names = [n for n in git('ls-tree', '--name-only', commit, 'sgatlin_nb/').split() if n.endswith('.py')]
    return {n.split('/')[-1]: git('show', f'{commit}:{n}', binary=True) for n in names if not n.endswith('/_modidx.py')}

def identity(files: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for name in sorted(files): h.update(name.encode() + b'\0' + files[name] + b'\0')
    return 'src-' + h.hexdigest()[:12]

CONFIGS = """
import json, sys
from sgatlin_nb.scaling import CPU_PROTOCOL, Point
points = json.loads(sys.argv[1])
for p in points: assert Point(**p['point']).key == p['key'], (p, Point(**p['point']).key)  # the run the file names
print(json.dumps({p['key']: CPU_PROTOCOL.config(Point(**p['point'])).to_dict() for p in points}))
"""

def configs_at(commit: str, points: list[dict]) -> dict:
    "The config the CPU protocol of `commit`'s package gives each point (`{'key', 'point'}`)."
    with tempfile.TemporaryDirectory() as tmp:
        archive = git('archive', commit, 'sgatlin_nb', binary=True)
        subprocess.run(['tar', '-x', '-C', tmp], input=archive, check=True)
        env = {'PYTHONPATH': tmp, 'JAX_PLATFORMS': 'cpu', 'PATH': '/usr/bin:/bin'}
        out = subprocess.run([sys.executable, '-c', CONFIGS, json.dumps(points)], cwd=tmp, env=env, capture_output=True, text=True)
        if out.returncode: raise SystemExit(f"the package of {commit} cannot give the configs:\n{out.stderr[-2000:]}")
        return json.loads(out.stdout.splitlines()[-1])

def main():
    tk = json.loads((RESULTS / 'tasks_cpu.json').read_text())
    seeds = {0: (tk['code'], tk['runs']), **{int(s): (v['code'], v['runs']) for s, v in tk.get('seed_runs', {}).items()}}
    wanted = {code for code, _ in seeds.values()}
    history = git('rev-list', '--reverse', 'HEAD').split()
    found = {}
    for i, c in enumerate(history):
        files = package_files(c)
        if (code := identity(files)) in wanted: found.setdefault(code, []).append((i, c, files))
    out = {'made_by': 'scripts/tasks_code.py', 'codes': {}}
    for code in sorted(wanted):
        if code not in found: raise SystemExit(f"no commit's package hashes to {code}: trained from uncommitted code")
        at = [i for i, _, _ in found[code]]
        if at != list(range(at[0], at[0] + len(at))): raise SystemExit(f"{code} is the package of commits apart in history: {at}")
        points = [{'key': r['key'], 'point': {'corpus': 'tinystories', 'budget': tk['budget'], 'variant': v, 'scale': tk['scale'],
                                              'seed': s}} for s, (c, runs) in seeds.items() if c == code for v, r in runs.items()]
        first, last = found[code][0][1], found[code][-1][1]
        out['codes'][code] = {
            'commits': [c for _, c, _ in found[code]],  # oldest first: the code was committed in the first, unchanged until the last
            'seeds': sorted(s for s, (c, _) in seeds.items() if c == code),
            'files': {n: hashlib.sha256(b).hexdigest() for n, b in sorted(found[code][-1][2].items())},
            'configs': configs_at(last, points)}
        print(code, 'commits', first[:7], '...', last[:7], f"({len(at)})", 'seeds', out['codes'][code]['seeds'], flush=True)
    (RESULTS / 'tasks_cpu_code.json').write_text(json.dumps(out, indent=1) + '\n')

if __name__ == '__main__': main()
