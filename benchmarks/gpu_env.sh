# Sourced by the GPU scripts (gpu_checks.sh, gpu_runs.sh): xcbench from src/ on the GPU machine's own python3,
# and xcbench's light dependencies missing there (jsonschema and its needs) installed from wheels in .whl/ to /tmp/site.
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
