#include "geotrain/runtime/mpi_check.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iomanip>
#include <sstream>
#include <thread>
#include <vector>

namespace geotrain::runtime {

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) GT_MPI_CHECK(MPI_Init(argc, argv));
  GT_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  GT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  GT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

int world_rank() {
  int rank = -1, initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

const std::string& host_name() {
  static const std::string name = [] {
    char buffer[MPI_MAX_PROCESSOR_NAME] = {};
    int length = 0;
    if (MPI_Get_processor_name(buffer, &length) != MPI_SUCCESS) return std::string("?");
    return std::string(buffer, static_cast<std::size_t>(length));
  }();
  return name;
}

void abort_all(const std::string& message) {
  // One write, so lines of different ranks do not interleave.
  const std::string line = "geotrain: rank " + std::to_string(world_rank()) + " (host " + host_name() +
                           "): " + message + "; aborting\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);  // MPI_Abort does not return; in case it does
}

void mpi_call_failed(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  abort_all(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " +
            (length > 0 ? std::string(text, static_cast<std::size_t>(length)) : "error " + std::to_string(code)));
}

namespace {

// Calls `done` until it returns true (returns) or the deadline passes
// (calls `expired`, which aborts unless it finds the wait over after all).
// Spins (yielding) while an answer may be close, then backs off to sleeps of
// up to 1 ms so that oversubscribed ranks share the cores.
template <typename Done, typename Expired>
void poll_until_deadline(double deadline_s, double spin_s, Done done, Expired expired) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto deadline = start + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(deadline_s));
  auto pause = std::chrono::microseconds(0);
  for (;;) {
    if (done()) return;
    if (clock::now() >= deadline) {
      expired();
      return;
    }
    if (pause.count() == 0) {
      std::this_thread::yield();
      if (clock::now() - start > std::chrono::duration<double>(spin_s)) pause = std::chrono::microseconds(20);
    } else {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }
}

[[noreturn]] void abort_no_answer(const std::vector<int>& missing, double deadline_s, const std::string& what) {
  std::ostringstream message;
  message << "no answer from ";
  if (!missing.empty()) {
    message << (missing.size() == 1 ? "rank " : "ranks ");
    for (std::size_t i = 0; i < missing.size(); ++i) message << (i ? ", " : "") << missing[i];
  } else {
    message << "the other ranks";
  }
  message << " within " << std::setprecision(3) << deadline_s << " s while " << what;
  abort_all(message.str());
}

// Polls until all complete (returns) or the deadline passes (aborts, naming
// the peers of the requests still open; peer < 0 = unknown, a collective).
void wait_until_deadline(std::span<MPI_Request> requests, std::span<const int> peers, double deadline_s,
                         const std::string& what, double spin_s) {
  auto all_done = [&] {
    int done = 0;
    GT_MPI_CHECK(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE));
    return done != 0;
  };
  auto expired = [&] {
    std::vector<int> missing;  // peers of the requests still open (peer < 0: a collective)
    int open = 0;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      int complete = 0;
      GT_MPI_CHECK(MPI_Test(&requests[i], &complete, MPI_STATUS_IGNORE));
      if (complete) continue;
      ++open;
      const int peer = peers.size() == 1 ? peers[0] : peers[i];
      if (peer >= 0 && std::find(missing.begin(), missing.end(), peer) == missing.end()) missing.push_back(peer);
    }
    if (open > 0) abort_no_answer(missing, deadline_s, what);  // else: the last ones completed just now
  };
  poll_until_deadline(deadline_s, spin_s, all_done, expired);
}

}  // namespace

void wait_all_or_abort(std::span<MPI_Request> requests, double deadline_s, const std::string& what, int peer,
                       double spin_s) {
  const int peers[1] = {peer};
  wait_until_deadline(requests, peers, deadline_s, what, spin_s);
}

void wait_each_or_abort(std::span<MPI_Request> requests, std::span<const int> peers, double deadline_s,
                        const std::string& what, double spin_s) {
  if (peers.size() != requests.size()) abort_all("wait_each_or_abort: one peer per request needed");
  wait_until_deadline(requests, peers, deadline_s, what, spin_s);
}

void wait_for_message_or_abort(MPI_Comm comm, int source, int tag, double deadline_s, const std::string& what,
                               double spin_s) {
  auto arrived = [&] {
    int flag = 0;
    GT_MPI_CHECK(MPI_Iprobe(source, tag, comm, &flag, MPI_STATUS_IGNORE));
    return flag != 0;
  };
  auto expired = [&] {
    if (!arrived()) abort_no_answer({source}, deadline_s, what);
  };
  poll_until_deadline(deadline_s, spin_s, arrived, expired);
}

}  // namespace geotrain::runtime
