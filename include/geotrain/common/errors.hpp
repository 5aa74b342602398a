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

// A failure that one rank of a job has already reported on stderr (one
// line for the whole job): every rank leaves with code() and prints nothing more.
class ReportedFailure : public std::runtime_error {
 public:
  explicit ReportedFailure(int code) : std::runtime_error("a failure reported by one rank of the job"), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

constexpr int kExitInputError = 2;
constexpr int kExitRunError = 1;

}  // namespace geotrain
