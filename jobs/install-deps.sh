#!/usr/bin/env bash
# Installs the Debian packages geotrain needs to build and test (as root, or
# with sudo). Packages already present are skipped, so this is cheap to rerun.
set -euo pipefail
packages=(cmake ninja-build g++ python3 libtomlplusplus-dev libcli11-dev nlohmann-json3-dev
          libgtest-dev libbenchmark-dev libopenblas-dev openmpi-bin libopenmpi-dev
          libhdf5-dev hdf5-tools python3-h5py python3-numpy python3-torch python3-matplotlib
          slurm-wlm munge iptables libnetfilter-queue-dev clang libclang-rt-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=""
  [[ $(id -u) -eq 0 ]] || sudo_cmd="sudo"
  echo "geotrain: installing ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
