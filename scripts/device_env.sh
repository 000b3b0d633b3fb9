# Source this on the lent GPU machine (repo root) before running the swarm or the GPU scripts there:
#   source scripts/device_env.sh
# It has torch, triton and most dependencies but not pydantic or gitpython, and reaches no index; their wheels
# travel in .whl/ (`pip download -d .whl --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64
# pydantic gitpython` here, then carry .whl). They go to /opt, not /tmp: evaluator workers get a private /tmp.
pip install -q --no-index --find-links .whl --target /opt/swarm_site pydantic gitpython
export PYTHONPATH=/opt/swarm_site:$PWD
git config --global user.name >/dev/null || git config --global user.name "swarm on device"
git config --global user.email >/dev/null || git config --global user.email "swarm@device.invalid"
