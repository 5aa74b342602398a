// A fresh, empty folder for the running test. ctest runs the tests of one
// executable in parallel processes, so a folder shared between tests (a fixed
// name under /tmp) lets one test read another's half-written file.
//
// The folder is removed when its test passes and kept when it fails, for
// inspection: a suite run many times must not fill the disk.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace geotrain::testing {

class ScratchDirRemover : public ::testing::EmptyTestEventListener {
 public:
  static std::vector<std::filesystem::path>& made() {
    static std::vector<std::filesystem::path> folders;
    return folders;
  }

  void OnTestEnd(const ::testing::TestInfo& test) override {
    if (test.result() != nullptr && !test.result()->Failed()) {
      std::error_code ignored;
      for (const auto& dir : made()) std::filesystem::remove_all(dir, ignored);
    }
    made().clear();
  }
};

// gtest owns the listener; one per process however many files include this.
inline const bool scratch_dir_remover_installed = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new ScratchDirRemover);
  return true;
}();

inline std::filesystem::path scratch_dir(const std::string& topic) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name = std::string("geotrain-") + topic + "-" + test->test_suite_name() + "-" + test->name() +
                           "-" + std::to_string(::getpid());
  std::string safe = name;
  for (char& c : safe) {
    if (c == '/') c = '_';  // parameterised tests are named "Suite/Test/0"
  }
  const auto dir = std::filesystem::temp_directory_path() / safe;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ScratchDirRemover::made().push_back(dir);
  return dir;
}

}  // namespace geotrain::testing
