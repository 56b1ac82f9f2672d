#!/usr/bin/env bash
# A whole verify of examples/regression on a lent GPU machine's own interpreter (docs/gpu.md, "What has run on a GPU"),
# then the same with the GPU hidden (it must stop at backend). Run from the repository's root with OUT naming a folder
# and WHEELS a folder of the orchestrator's dependencies as wheels, fetched beforehand where there is a network:
#   pip download --only-binary :all: --no-deps -d WHEELS packaging tomlkit filelock pyelftools
set -u
python3 -c "import sklearn, numpy, torch; print('sklearn', sklearn.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, torch.cuda.is_available())"
py=$(command -v python3)
root=$PWD
deps=$(printf '%s:' "$WHEELS"/*.whl)
cd examples/regression || exit 2
env PYTHONPATH="$deps$root" timeout 300 python3 -m kernodeck verify --python "$py" --expect-backend cuda \
    --out "$OUT/regression-cuda" > "$OUT/verify.log" 2>&1
echo "rc=$?"
grep -v "steps (loss" "$OUT/verify.log" | tail -22
env CUDA_VISIBLE_DEVICES= PYTHONPATH="$deps$root" timeout 120 python3 -m kernodeck verify --python "$py" \
    --expect-backend cuda --out "$OUT/regression-hidden" > "$OUT/hidden.log" 2>&1
echo "rc_hidden=$?"
grep -E "backend|FAILED|ERROR|TIP" "$OUT/hidden.log" | tail -6
