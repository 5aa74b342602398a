#!/usr/bin/env bash
# The main job on its embedded default: plan the paper's world-wide network
# (64 GPUs in 8 cities on 3 continents) and print the plan. Installs and
# builds what is missing first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash jobs/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target geotrain
exec build/release/geotrain plan --scenario inputs/scenarios/world-wide.toml "$@"
