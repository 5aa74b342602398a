// The project's two failure kinds and their exit codes (see README, "Errors").
#pragma once
#include <stdexcept>
#include <string>

namespace geotrain {

// Bad input or configuration: exit code 2. The message names the file and
// field ("scenario.toml: network.bandwidth_gbps[3][7]: must be > 0, got -1").
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Failure at run time (lost rank, I/O error): exit code 1.
class RunError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

constexpr int kExitInputError = 2;
constexpr int kExitRunError = 1;

}  // namespace geotrain
