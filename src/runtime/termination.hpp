// SIGTERM (Slurm's pre-emption notice) and SIGINT (Ctrl-C) ask a training
// rank to checkpoint and stop; a second Ctrl-C stops at once.
#pragma once

namespace geotrain::runtime {

// Installs the handlers and forgets any earlier request.
void watch_for_termination();
bool termination_requested();
// "SIGINT" or "SIGTERM": the signal that asked.
const char* termination_signal_name();

}  // namespace geotrain::runtime
