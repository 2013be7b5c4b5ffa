#!/usr/bin/env bash
# Wheels that the lent GPU machine lacks for `benchmarks/gpu_bench.py` (its image holds jax with CUDA, flax, optax,
# orbax, pandas, pyarrow, tokenizers, tqdm; it reaches no package index), for its Python 3.12, into .whl/ (ignored).
# Then, on the device:  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
#                       PYTHONPATH=/tmp/site:. python3 benchmarks/gpu_bench.py --out "$OUT"
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
PLATFORMS=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do PLATFORMS+=(--platform "$p"); done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLATFORMS[@]}" -d .whl \
  omegaconf altair jsonschema jsonschema-specifications referencing rpds-py
python3 -m pip wheel -q --no-deps -w .whl 'antlr4-python3-runtime==4.9.3'  # omegaconf's parser; published as a source archive only
ls -la .whl
