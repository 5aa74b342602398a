#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: the release build's
# full ctest suite, the Slurm jobs on a local single-node Slurm, the WAN
# emulator against the probe and a link cut, the unit and MPI tests again
# under AddressSanitizer + UndefinedBehaviorSanitizer, the threaded code under
# ThreadSanitizer, the fuzz harnesses for
# a bounded time (GEOTRAIN_FUZZ_SECONDS each, 8), the CUDA backend's kernels
# executed on the CPU by the CUDA emulation (tests/cuda_emu), and a compile +
# link of the CUDA backend when nvcc exists (no GPU needed). Exit status is
# non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
# Where CI's time goes: one line per stage, minutes since the start.
stage() { printf 'tests/run.sh: [%3d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }
trap 'stage "done (exit $?)"' EXIT
stage "installing dependencies"
bash jobs/install-deps.sh
jobs=$(nproc)

# The builds and the tests' checkpoints take ~5 GiB here and in the temp
# folder; a full disk otherwise shows up as a dozen unrelated test failures.
for folder in . "${TMPDIR:-/tmp}"; do
  free_gib=$(df -P -k "$folder" | awk 'NR == 2 { print int($4 / 1048576) }')
  if (( free_gib < 6 )); then
    echo "tests/run.sh: only ${free_gib} GiB free on the disk of $(cd "$folder" && pwd); the suite needs ~6 GiB: free some space and rerun" >&2
    exit 1
  fi
done

# One compiler cache for every build here (CMakeLists.txt uses ccache where
# installed): the CUDA compile's host sources are the release build's (the
# same preprocessed text), ~2 min of its 2.5 saved. Kept in build/, so a clean
# clone starts from an empty cache, as CI does.
export CCACHE_DIR="${CCACHE_DIR:-$PWD/build/ccache}"

stage "release: build"
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
stage "release: tests"
ctest --preset release -j "$jobs"

# The sbatch scripts on a real single-node Slurm (needs root for the daemons).
if [[ $(id -u) -eq 0 ]]; then
  for python in python3 /usr/bin/python3; do
    "$python" -c 'import h5py' 2>/dev/null && break
  done
  stage "Slurm jobs"
  bash tests/slurm/check_slurm_jobs.sh build/release/slurm-test "$python"
  # The WAN emulator (network namespaces): the probe recovers its matrix.
  stage "WAN emulation"
  "$python" tests/emulate/check_probe_accuracy.py build/release/geotrain build/release/emulate-test
  # Shared links (a site uplink, a NIC): streams at once take the flow model's time.
  "$python" tests/emulate/check_shared_links.py build/release/shared-links-test
  # A link cut (100% loss) between two pipeline peers: deadline abort naming them, no hang.
  "$python" tests/emulate/check_link_cut.py build/release/geotrain build/release/link-cut-test
  # Devices of fixed speed (emulate.py --cpus-per-rank): ranks in capped CPU cgroups.
  if [[ -e /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]] || grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    "$python" tests/emulate/check_cpu_cap.py
  else
    echo "tests/run.sh: no cgroup cpu controller mounted: emulate.py --cpus-per-rank (tests/emulate/check_cpu_cap.py) skipped"
  fi
else
  echo "tests/run.sh: not root: the Slurm job tests (tests/slurm) and the WAN emulation test (tests/emulate) need root; skipped"
fi

# Sanitizers: unit, kernel, model and MPI tests (the single-rank training
# runs and the 10-layout trajectory test are left to the release build: the
# same code, several times slower under ASan). The MPI tests run on the short
# fixture (GEOTRAIN_TEST_FIXTURE in the presets: the same model on 32-token
# sequences, tests/support/training_script.py). The fuzz corpora's replays are
# left to the fuzzing stage, which runs every corpus input under clang's ASan
# + UBSan before it fuzzes.
# The sanitizer builds compile each library as unity batches (tests/
# CMakeLists.txt keeps the test files apart): 4.5 min instead of 7 for ASan
# here. The release build, the product, compiles file by file.
stage "asan: build"
cmake --preset asan -DCMAKE_UNITY_BUILD=ON >/dev/null
cmake --build --preset asan -j "$jobs" --target geotrain_unit_tests geotrain_kernel_tests geotrain_model_tests \
  geotrain geotrain_mpi_tests geotrain_mpi_silent_rank
stage "asan: tests"
ctest --preset asan -j "$jobs" -R '^(unit|kernels|model)\.' -E 'Training'
ctest --preset asan-mpi -j "$jobs"

# ThreadSanitizer: the code that starts threads (the background checkpoint
# writer) alone and under mpirun.
stage "tsan: build and tests"
cmake --preset tsan -DCMAKE_UNITY_BUILD=ON >/dev/null
# Only what the tsan preset's tests run: the background worker's and the
# checkpoint tests, and the binary the MPI checkpoint cases start.
cmake --build --preset tsan -j "$jobs" --target geotrain_common_tests geotrain_model_tests geotrain
ctest --preset tsan -j "$jobs"

# libFuzzer (clang): every harness a bounded time on a copy of its corpus.
stage "fuzzing"
bash fuzz/run.sh "${GEOTRAIN_FUZZ_SECONDS:-8}" build/fuzz/results

# The CUDA kernels executed without a GPU (tests/cuda_emu): the .cu files
# built by the host compiler, the golden and parity suites on them, again
# under the adversarial schedules, the check that every kernel ran (~2 min);
# then under ASan + UBSan with one warp running ahead (~2 min).
stage "cuda-emu: build and tests"
cmake --preset cuda-emu >/dev/null
# Only the two suites the presets run (the rest of the project is the
# release build's, compiled by the same host compiler).
emu_targets=(geotrain_kernel_tests geotrain_cuda_parity_tests)
cmake --build --preset cuda-emu -j "$jobs" --target "${emu_targets[@]}"
ctest --preset cuda-emu -j "$jobs"
stage "cuda-emu-asan: build and tests"
cmake --preset cuda-emu-asan >/dev/null
cmake --build --preset cuda-emu-asan -j "$jobs" --target "${emu_targets[@]}"
ctest --preset cuda-emu-asan -j "$jobs"

if command -v nvcc >/dev/null 2>&1; then
  # One architecture here (the preset builds sm_80 and sm_90): what this
  # checks, that the backend compiles and links, does not depend on it, and
  # the nvcc part takes ~28% less time.
  stage "cuda: compile"
  cmake --preset cuda -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
  cmake --build --preset cuda -j "$jobs" --target geotrain geotrain_cuda_parity_tests
  build/cuda/geotrain --version
else
  echo "tests/run.sh: nvcc not found: CUDA backend not compiled"
fi
