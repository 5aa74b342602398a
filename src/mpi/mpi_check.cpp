#include "geotrain/mpi/mpi_check.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iomanip>
#include <sstream>
#include <thread>
#include <vector>

namespace geotrain::runtime {

MpiSession::MpiSession(int* argc, char*** argv) : previous_handler_(set_call_failure_handler(abort_all)) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  // MULTIPLE: a checkpoint's background writer takes part in the parallel
  // HDF5 write (MPI-IO collectives on a communicator of its own) while the
  // training thread goes on with its own MPI traffic. Where the library gives
  // less, only those checkpoint forms are refused (threads_multiple()).
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) GT_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  GT_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  GT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  GT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
  set_call_failure_handler(previous_handler_);
}

bool threads_multiple() {
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  return level == MPI_THREAD_MULTIPLE;
}

int world_rank() {
  int rank = -1, initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
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

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS || length <= 0) return "error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(length));
}

namespace {

// Liveness: when a wait on one peer passes its deadline, the peer may be
// alive but itself waiting on a silent rank further down the pipeline. The
// waiter pings it (tags reserved on MPI_COMM_WORLD); every waiting rank
// answers pings while it polls. An answer earns the peer one more deadline,
// so the abort comes from the rank next to the silent one and names it.
constexpr int kPingTag = 32001, kPongTag = 32002;
const int kLivenessWord = 1;

void answer_pings() {
  for (;;) {
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kPingTag, MPI_COMM_WORLD, &flag, &status) != MPI_SUCCESS || !flag) return;
    int word = 0;
    GT_MPI_CHECK(MPI_Recv(&word, 1, MPI_INT, status.MPI_SOURCE, kPingTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    MPI_Request reply;
    GT_MPI_CHECK(MPI_Isend(&kLivenessWord, 1, MPI_INT, status.MPI_SOURCE, kPongTag, MPI_COMM_WORLD, &reply));
    GT_MPI_CHECK(MPI_Request_free(&reply));
  }
}

// Pings every rank of `peers` and returns those that do not answer within
// `grace_s` (empty also when `done` turns true meanwhile).
template <typename Done>
std::vector<int> silent_among(const std::vector<int>& peers, double grace_s, Done done) {
  for (int peer : peers) {
    MPI_Request ping;
    GT_MPI_CHECK(MPI_Isend(&kLivenessWord, 1, MPI_INT, peer, kPingTag, MPI_COMM_WORLD, &ping));
    GT_MPI_CHECK(MPI_Request_free(&ping));
  }
  std::vector<int> silent = peers;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  while (!silent.empty() && std::chrono::steady_clock::now() < until) {
    answer_pings();
    if (done()) return {};
    for (auto it = silent.begin(); it != silent.end();) {
      int flag = 0;
      GT_MPI_CHECK(MPI_Iprobe(*it, kPongTag, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
      if (flag) {
        int word = 0;
        GT_MPI_CHECK(MPI_Recv(&word, 1, MPI_INT, *it, kPongTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        it = silent.erase(it);
      } else {
        ++it;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return silent;
}

// Calls `done` until it returns true (returns) or the deadline passes. Then
// it pings the ranks the wait depends on (`peers`): when all answer, it
// waits one more deadline; otherwise calls `expired` with the silent ones
// (empty: none known), which aborts unless it finds the wait over after all. Spins (yielding) while an answer may be close, then
// backs off to sleeps of up to 1 ms so that oversubscribed ranks share the
// cores, answering other ranks' pings while it sleeps.
template <typename Done, typename Expired>
void poll_until_deadline(double deadline_s, double spin_s, const std::vector<int>& peers, Done done, Expired expired) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto span = std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(deadline_s));
  auto deadline = start + span;
  bool extended = false;
  auto pause = std::chrono::microseconds(0);
  for (;;) {
    if (done()) return;
    if (clock::now() >= deadline) {
      const double grace_s = std::min(deadline_s, std::max(1.0, 0.1 * deadline_s));
      std::vector<int> silent;
      if (!peers.empty()) {
        silent = silent_among(peers, grace_s, done);
        if (done()) return;
        if (silent.empty() && !extended) {
          extended = true;
          deadline = clock::now() + span;
          continue;
        }
      }
      expired(silent);
      return;
    }
    if (pause.count() == 0) {
      std::this_thread::yield();
      if (clock::now() - start > std::chrono::duration<double>(spin_s)) pause = std::chrono::microseconds(20);
    } else {
      answer_pings();
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

// Polls until all complete (returns) or the deadline passes: then pings the
// peers of the requests and `members` (a collective's other ranks), and
// aborts naming the silent ones, or the peers of the requests still open.
void wait_until_deadline(std::span<MPI_Request> requests, std::span<const int> peers, double deadline_s,
                         const std::string& what, double spin_s, std::span<const int> members) {
  auto all_done = [&] {
    int done = 0;
    GT_MPI_CHECK(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE));
    return done != 0;
  };
  auto expired = [&](const std::vector<int>& silent) {
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
    if (open > 0) abort_no_answer(silent.empty() ? missing : silent, deadline_s, what);  // else: done just now
  };
  std::vector<int> pingable;
  const int self = world_rank();
  auto add = [&](int rank) {
    if (rank >= 0 && rank != self && std::find(pingable.begin(), pingable.end(), rank) == pingable.end()) {
      pingable.push_back(rank);
    }
  };
  for (int peer : peers) add(peer);
  for (int member : members) add(member);
  poll_until_deadline(deadline_s, spin_s, pingable, all_done, expired);
}

}  // namespace

void cancel_pending(std::span<MPI_Request> requests) {
  for (MPI_Request& request : requests) {
    if (request != MPI_REQUEST_NULL) {
      MPI_Cancel(&request);
      MPI_Request_free(&request);
    }
  }
}

bool requests_complete(std::vector<MPI_Request>& requests) {
  int complete = 1;
  if (!requests.empty()) {
    GT_MPI_CHECK(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &complete, MPI_STATUSES_IGNORE));
  }
  if (complete) requests.clear();
  return complete != 0;
}

void wait_all_or_abort(std::span<MPI_Request> requests, double deadline_s, const std::string& what, int peer,
                       double spin_s, std::span<const int> members) {
  const int peers[1] = {peer};
  wait_until_deadline(requests, peers, deadline_s, what, spin_s, members);
}

void wait_collective_or_abort(std::span<MPI_Request> requests, MPI_Comm comm, int root, double deadline_s,
                              const std::string& what) {
  int rank = 0, size = 1;
  GT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  GT_MPI_CHECK(MPI_Comm_size(comm, &size));
  std::vector<int> local(static_cast<std::size_t>(size)), world(local.size());
  for (int r = 0; r < size; ++r) local[static_cast<std::size_t>(r)] = r;
  MPI_Group group, world_group;
  GT_MPI_CHECK(MPI_Comm_group(comm, &group));
  GT_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
  GT_MPI_CHECK(MPI_Group_translate_ranks(group, size, local.data(), world_group, world.data()));
  GT_MPI_CHECK(MPI_Group_free(&group));
  GT_MPI_CHECK(MPI_Group_free(&world_group));
  if (root >= 0 && rank != root) {
    wait_all_or_abort(requests, deadline_s, what, world[static_cast<std::size_t>(root)]);
    return;
  }
  world.erase(world.begin() + rank);
  wait_all_or_abort(requests, deadline_s, what, -1, 2e-4, world);
}

void wait_each_or_abort(std::span<MPI_Request> requests, std::span<const int> peers, double deadline_s,
                        const std::string& what, double spin_s) {
  if (peers.size() != requests.size()) abort_all("wait_each_or_abort: one peer per request needed");
  wait_until_deadline(requests, peers, deadline_s, what, spin_s, {});
}

void wait_for_message_or_abort(MPI_Comm comm, int source, int tag, double deadline_s, const std::string& what,
                               double spin_s) {
  auto arrived = [&] {
    int flag = 0;
    GT_MPI_CHECK(MPI_Iprobe(source, tag, comm, &flag, MPI_STATUS_IGNORE));
    return flag != 0;
  };
  auto expired = [&](const std::vector<int>&) {
    if (!arrived()) abort_no_answer({source}, deadline_s, what);
  };
  poll_until_deadline(deadline_s, spin_s, std::vector<int>{source}, arrived, expired);
}

}  // namespace geotrain::runtime
