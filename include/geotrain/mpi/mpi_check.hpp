// Checked MPI calls, deadlines and the abort path of the distributed runtime.
//
// Every MPI call goes through GT_MPI_CHECK, the MPI member of the
// checked-call family (common/check.hpp). MpiSession makes abort_all the
// family's failure handler, so a failed MPI, CUDA or NCCL call on any rank
// prints one line naming host, rank, file:line, the call and the library's
// error string, then aborts every rank (MPI_Abort on MPI_COMM_WORLD).
// Communicators use MPI_ERRORS_RETURN (set by MpiSession), so errors come
// back as codes and are reported here instead of inside the library. Every
// network wait has a deadline: wait_all_or_abort polls instead of blocking
// forever.
#pragma once
#include <mpi.h>

#include <span>
#include <string>
#include <vector>

#include "geotrain/common/check.hpp"

namespace geotrain::runtime {

// MPI_Init + MPI_ERRORS_RETURN on MPI_COMM_WORLD + abort_all as the failure
// handler of checked calls; MPI_Finalize and the previous handler on destruction.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  int rank_ = 0, size_ = 1;
  CallFailureHandler previous_handler_ = nullptr;
};

// This process's rank in MPI_COMM_WORLD (-1 before MPI_Init).
int world_rank();

// MPI gave MPI_THREAD_MULTIPLE: a second thread may call MPI (the parallel
// checkpoint forms' background writer).
bool threads_multiple();

// Prints "geotrain: rank R (host H): <message>; aborting" on stderr and calls
// MPI_Abort(MPI_COMM_WORLD, 1). Never returns.
[[noreturn]] void abort_all(const std::string& message);

// MPI_Error_string of `code`.
std::string mpi_error_text(int code);

inline void check_mpi(int code, const char* call, const char* file, int line) {
  if (code != MPI_SUCCESS) call_failed({"MPI", call, file, line}, mpi_error_text(code));
}

// Cancels and frees every request still pending (on an exception path,
// before the buffers they point at go away).
void cancel_pending(std::span<MPI_Request> requests);

// Without blocking: true, with `requests` emptied, once every one has
// completed (true at once when there are none); false while any is pending.
bool requests_complete(std::vector<MPI_Request>& requests);

// Waits until every request completes or `deadline_s` seconds (steady
// clock, from the call) pass. On the deadline: one line on stderr,
//   geotrain: rank R (host H): no answer from rank P within D s while <what>; aborting
// (with `peer` < 0: "no answer from the other ranks of <what>"), then
// MPI_Abort. Polls MPI_Testall, yielding the CPU, for the first `spin_s`
// seconds, then with sleeps growing to 1 ms, so waiting ranks leave the
// cores to the others (timed exchanges pass a longer spin_s).
//
// Before aborting, the ranks the wait depends on (`peer`, or a collective's
// `members`, world ranks) are pinged; every waiting rank answers pings. If
// all answer within a grace of max(1 s, deadline / 10) (at most the
// deadline), they are alive but waiting themselves: the wait gets one more
// deadline, so that the abort comes from the rank next to the silent one and
// names it. Otherwise the silent ones are named.
void wait_all_or_abort(std::span<MPI_Request> requests, double deadline_s, const std::string& what, int peer,
                       double spin_s = 2e-4, std::span<const int> members = {});

// The wait of a collective on `comm`: `root` >= 0 (a rank of `comm`) for a
// rooted one (gather, broadcast), -1 for one without (all-reduce). Before
// aborting, the root, or every member of an unrooted one, pings all the
// others and a non-root pings the root, so the message names the rank that
// is gone or cut off rather than "the other ranks".
void wait_collective_or_abort(std::span<MPI_Request> requests, MPI_Comm comm, int root, double deadline_s,
                              const std::string& what);

// Same, for requests with different peers (`peers[i]` answers
// `requests[i]`); on the deadline the message names every peer whose request
// is still open ("no answer from rank 1" / "from ranks 1, 3").
void wait_each_or_abort(std::span<MPI_Request> requests, std::span<const int> peers, double deadline_s,
                        const std::string& what, double spin_s = 2e-4);

// Returns once a message from `source` with `tag` on `comm` can be received
// (MPI_Iprobe: for a large message, once its first part has arrived);
// aborts naming `source` after `deadline_s`, like wait_all_or_abort.
void wait_for_message_or_abort(MPI_Comm comm, int source, int tag, double deadline_s, const std::string& what,
                               double spin_s = 2e-4);

}  // namespace geotrain::runtime

#define GT_MPI_CHECK(call) ::geotrain::runtime::check_mpi((call), #call, __FILE__, __LINE__)
