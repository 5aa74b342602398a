#!/usr/bin/env bash
# The main job on its embedded default: train the tiny GPT on the shipped
# corpus (inputs/quickstart.toml) on this machine's GPU if usable, else its
# CPU, with a progress line per step and the validation loss at the end.
# Installs and builds what is missing first. Extra arguments are overrides,
# e.g. bash jobs/quickstart.sh --train.steps=50
set -euo pipefail
cd "$(dirname "$0")/.."
bash jobs/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target geotrain
exec build/release/geotrain train inputs/quickstart.toml "$@"
