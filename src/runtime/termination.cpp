#include "termination.hpp"

#include <csignal>

namespace geotrain::runtime {
namespace {

// The signal that asked this rank to stop (0: none).
volatile std::sig_atomic_t requested = 0;

extern "C" void request_termination(int signal_number) {
  // A second Ctrl-C means now: no checkpoint.
  if (signal_number == SIGINT && requested == SIGINT) {
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
  }
  requested = signal_number;
}

}  // namespace

void watch_for_termination() {
  requested = 0;
  std::signal(SIGTERM, request_termination);
  std::signal(SIGINT, request_termination);
}

bool termination_requested() { return requested != 0; }

const char* termination_signal_name() { return requested == SIGINT ? "SIGINT" : "SIGTERM"; }

}  // namespace geotrain::runtime
