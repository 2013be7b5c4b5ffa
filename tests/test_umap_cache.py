"""`umap_2d` keeps what numba compiles for UMAP in numba's on-disk cache (`cache_numba_compiles`): a second process reads
the machine code of UMAP's functions instead of compiling them again, and draws the same map. (pynndescent, which UMAP
imports, marks its own functions for the cache; of UMAP's, one is marked, and the layout optimizer, the costly one to
compile, is not.)"""
import json
import os
import subprocess
import sys

SCRIPT = '''
import json, sys, time, numpy as np
from numba.core.dispatcher import Dispatcher
from sgatlin_nb.embedding import umap_2d
rng = np.random.default_rng(0)
X = rng.normal(size=(300, 16)).astype(np.float32)
U = X / np.linalg.norm(X, axis=1, keepdims=True)
D = 1 - U @ U.T
np.fill_diagonal(D, np.inf)
rows = np.argsort(D, axis=1)[:, :8]
t0 = time.perf_counter()
Y = umap_2d(X, rows, np.take_along_axis(D, rows, 1), n_epochs=30)
seconds = time.perf_counter() - t0
compiled, read = [], []  # UMAP's functions this process ran, and those of them read from the cache
for name, mod in list(sys.modules.items()):
    if mod is None or name.split('.')[0] != 'umap': continue
    for key, f in vars(mod).items():
        if isinstance(f, Dispatcher) and f.signatures and f'{f.__module__}.{key}' not in compiled:
            compiled.append(f'{f.__module__}.{key}')
            if sum(f.stats.cache_hits.values()): read.append(compiled[-1])
print(json.dumps({'compiled': compiled, 'read': read, 'seconds': seconds, 'map': Y.tolist()}))
'''


def test_a_second_process_reads_umaps_compiled_functions_from_the_cache(tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "JAX_PLATFORMS": "cpu"}  # an empty cache at first
    runs = []
    for _ in range(2):
        res = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    print(f"UMAP of 300 points: {cold['seconds']:.1f} s compiling, {warm['seconds']:.1f} s reading the cache; "
          f"read back {len(warm['read'])} of {len(warm['compiled'])}: {warm['read']}")
    assert cold["read"] == [] and set(warm["compiled"]) <= set(cold["compiled"]), (cold["compiled"], warm["compiled"])
    # the layout optimizer and most others read back (the small random-number helpers that numba compiles into their
    # callers are compiled again); without `cache_numba_compiles`, 1 of 8
    assert len(warm["read"]) >= len(warm["compiled"]) / 2, (warm["read"], warm["compiled"])
    assert any("optimize_layout" in n for n in warm["read"]), warm["read"]
    assert warm["map"] == cold["map"]  # the same machine code: the same map, bit for bit
