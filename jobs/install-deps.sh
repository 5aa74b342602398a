#!/usr/bin/env bash
# Installs the Debian packages geotrain needs to build and test (as root, or
# with sudo). Packages already present are skipped, so this is cheap to rerun.
set -euo pipefail
packages=(cmake ninja-build g++ python3 python3-pip libtomlplusplus-dev libcli11-dev nlohmann-json3-dev
          libgtest-dev libbenchmark-dev libopenblas-dev openmpi-bin libopenmpi-dev
          libhdf5-dev libhdf5-openmpi-dev hdf5-tools python3-h5py python3-numpy python3-torch python3-matplotlib
          slurm-wlm munge iptables libnetfilter-queue-dev clang libclang-rt-dev ccache)
sudo_cmd=""
[[ $(id -u) -eq 0 ]] || sudo_cmd="sudo"
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "geotrain: installing ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Python packages Debian does not ship (tools/requirements.txt: the pinned
# tokenizers), for Debian's python3; skipped when the pinned version is there.
requirements=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tools/requirements.txt
want=$(sed -n 's/^tokenizers==\([^ ]*\).*/\1/p' "$requirements")
have=$(/usr/bin/python3 -c "import tokenizers; print(tokenizers.__version__)" 2>/dev/null || true)
if [[ $have != "$want" ]]; then
  echo "geotrain: installing tokenizers $want for /usr/bin/python3 (pip, tools/requirements.txt)"
  $sudo_cmd /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --break-system-packages --no-deps -r "$requirements"
fi
