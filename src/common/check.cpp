#include "geotrain/common/check.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "geotrain/common/errors.hpp"

namespace geotrain {
namespace {

std::atomic<CallFailureHandler> installed_handler{nullptr};
thread_local int throwing_scopes = 0;

// From "src/" on, so that reports do not depend on where the tree was built.
const char* project_path(const char* file) {
  const std::string path(file);
  const std::size_t at = path.rfind("src/");
  return at == std::string::npos ? file : file + at;
}

[[noreturn]] void throw_run_error(const std::string& description) {
  throw RunError(description + " on host " + host_name());
}

}  // namespace

std::string describe_failed_call(const CallSite& site, const std::string& error) {
  return std::string(site.library) + " error at " + project_path(site.file) + ":" + std::to_string(site.line) + ": " +
         site.call + " failed: " + error;
}

CallFailureHandler set_call_failure_handler(CallFailureHandler handler) {
  return installed_handler.exchange(handler);
}

void call_failed(const CallSite& site, const std::string& error) {
  const std::string description = describe_failed_call(site, error);
  const CallFailureHandler handler = installed_handler.load();
  if (throwing_scopes == 0 && handler != nullptr) handler(description);
  throw_run_error(description);  // also if a handler returns
}

void warn_failed_call(const CallSite& site, const std::string& error) noexcept {
  try {
    const std::string line = "geotrain: " + describe_failed_call(site, error) + "\n";
    std::fwrite(line.data(), 1, line.size(), stderr);
  } catch (...) {  // out of memory while describing: nothing more to say
  }
}

ThrowFailedCalls::ThrowFailedCalls() { ++throwing_scopes; }
ThrowFailedCalls::~ThrowFailedCalls() { --throwing_scopes; }

const std::string& host_name() {
  static const std::string name = [] {
    char buffer[256] = {};
    if (gethostname(buffer, sizeof buffer - 1) != 0) return std::string("unknown host");
    return std::string(buffer);
  }();
  return name;
}

}  // namespace geotrain
