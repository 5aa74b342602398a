// A fresh, empty folder for the running test. ctest runs the tests of one
// executable in parallel processes, so a folder shared between tests (a fixed
// name under /tmp) lets one test read another's half-written file.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace geotrain::testing {

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
  return dir;
}

}  // namespace geotrain::testing
