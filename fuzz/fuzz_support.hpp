// What every harness shares: a broken invariant aborts (libFuzzer and the
// replay driver both report an abort as a crash, with the input kept), and
// readers that take a path get the input through a scratch file.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <unistd.h>

namespace geotrain::fuzz {

[[noreturn]] inline void invariant_failed(const char* condition, const std::string& detail, const char* file,
                                          int line) {
  std::fprintf(stderr, "%s:%d: invariant violated: %s: %s\n", file, line, condition, detail.c_str());
  std::abort();
}

#define FUZZ_CHECK(condition, detail)                                                           \
  do {                                                                                          \
    if (!(condition)) ::geotrain::fuzz::invariant_failed(#condition, (detail), __FILE__, __LINE__); \
  } while (0)

// A file holding `contents` under $TMPDIR (mkstemp: unique per process and
// input), removed when this goes out of scope. Failing to make one is a
// broken harness, not a finding, but still stops the run loudly.
class ScratchFile {
 public:
  explicit ScratchFile(std::span<const std::uint8_t> contents) {
    const char* tmpdir = std::getenv("TMPDIR");
    std::string pattern = (tmpdir && *tmpdir ? std::string(tmpdir) : std::string("/tmp")) + "/geotrain-fuzz-XXXXXX";
    pattern = std::filesystem::absolute(pattern).string();  // readers resolve paths in the file against its folder
    const int fd = ::mkstemp(pattern.data());
    if (fd < 0) invariant_failed("mkstemp", pattern, __FILE__, __LINE__);
    path_ = pattern;
    std::size_t written = 0;
    while (written < contents.size()) {
      const ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
      if (n <= 0) invariant_failed("write", path_, __FILE__, __LINE__);
      written += static_cast<std::size_t>(n);
    }
    ::close(fd);
  }
  explicit ScratchFile(std::string_view text)
      : ScratchFile(std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size())) {}
  ~ScratchFile() { ::unlink(path_.c_str()); }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace geotrain::fuzz
