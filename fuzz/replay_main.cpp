// main() for the *_replay builds: runs a harness over files and folders
// (each folder's files, in name order) so that the committed corpus, crash
// regressions included, runs as a ctest test under every compiler and
// sanitizer preset, without libFuzzer. Exit 0 means every input passed;
// a finding aborts, as it does under libFuzzer.
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

#if defined(__SANITIZE_ADDRESS__)
#define GEOTRAIN_REPLAY_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GEOTRAIN_REPLAY_ASAN 1
#endif
#endif

// Some kept inputs are damaged files that claim terabytes: should a reader
// regress to allocating what they claim, the replay must fail at once, as
// libFuzzer's -rss_limit_mb makes the fuzzer fail, rather than swap.
#ifdef GEOTRAIN_REPLAY_ASAN
extern "C" const char* __asan_default_options() { return "max_allocation_size_mb=4096"; }
#endif

namespace {

void limit_memory() {
#ifndef GEOTRAIN_REPLAY_ASAN  // ASan reserves terabytes of address space for itself
  const rlimit limit{8ull << 30, 8ull << 30};
  setrlimit(RLIMIT_AS, &limit);
#endif
}

namespace fs = std::filesystem;

std::vector<fs::path> inputs_of(const fs::path& argument) {
  if (!fs::is_directory(argument)) return {argument};
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(argument)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
    return 2;
  }
  limit_memory();
  std::size_t runs = 0;
  for (int i = 1; i < argc; ++i) {
    if (!fs::exists(argv[i])) {
      std::fprintf(stderr, "%s: no such file or folder\n", argv[i]);
      return 2;
    }
    for (const fs::path& file : inputs_of(argv[i])) {
      std::ifstream in(file, std::ios::binary);
      const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (!in.eof() && in.fail()) {
        std::fprintf(stderr, "%s: cannot read\n", file.c_str());
        return 2;
      }
      std::fprintf(stderr, "replay %s (%zu bytes)\n", file.c_str(), bytes.size());
      // A copy in its own allocation: ASan then catches reads past the end.
      std::vector<std::uint8_t> copy(bytes.begin(), bytes.end());
      LLVMFuzzerTestOneInput(copy.empty() ? nullptr : copy.data(), copy.size());
      ++runs;
    }
  }
  std::printf("replayed %zu inputs\n", runs);
  return runs > 0 ? 0 : 1;
}
