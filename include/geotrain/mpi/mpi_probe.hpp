// Measures the network between the ranks of a communicator: latency and
// bandwidth of every ordered pair, as the planner's Network.
//
// Method: a roll call (every rank reports to rank 0, which names the ranks
// that do not), then the round-robin tournament of plan/tournament.hpp, so
// disjoint pairs measure concurrently in N-1 rounds (N for odd N). In each
// round a rank and its partner
//   1. warm up (small round trips, one large message each way: connections
//      and rendezvous paths open lazily),
//   2. time `latency_repeats` round trips of `small_bytes`; latency = median
//      RTT / 2 (one way; the same both ways),
//   3. each direction in turn: `bandwidth_repeats` times, Isend `large_bytes`
//      and half of it, each followed by a small acknowledgement; bandwidth =
//      (half the bytes) / (fastest time of the full - of the half message):
//      latency, the rendezvous round trip of large messages and the ack
//      cancel out. Where noise exceeds the difference (fast local links):
//      bytes / (median time - 2 * latency).
// The lower-ranked partner times the RTTs and sends its latency to the other;
// each direction's bandwidth is timed by its sender. Then, with 3 or more
// ranks on more than one host, each rank's NIC: to each rank in turn every other rank sends at
// once (full and half chunks, `fan_in_repeats` times each, the median difference); the rate at which
// the flow model's max-min sharing takes the measured time is the rank's NIC
// (plan::fan_in_capacity; where nothing was seen to bind, the sum of its
// pair rates). Each rank's row
// (its outgoing links) is then gathered to rank 0 with MPI_Igather and
// validated there (finite, latency >= 0, bandwidth > 0), as are the host
// names. Sites are the ranks under the first wide latency gap of a
// millisecond or more (plan::sites_by_latency), each named by its first
// rank's host. With two or more sites, each site's ranks send to other
// sites' ranks at once, and one of them alone, then the same inbound (full
// and half chunks, `uplink_repeats` times; probe_uplinks.hpp): a site whose
// ranks together took 20% longer than one alone gets the uplink that their
// bytes took, the others their ranks' NICs together. Every wait has a
// deadline: a rank that stops answering makes the others abort, naming it
// (mpi_check.hpp).
#pragma once
#include <mpi.h>

#include <cstdint>

#include "geotrain/plan/network.hpp"

namespace geotrain::runtime {

struct ProbeOptions {
  int small_bytes = 8;
  std::int64_t large_bytes = 4 << 20;  // 4 MiB
  int latency_repeats = 20;
  int bandwidth_repeats = 4;
  int warmup_round_trips = 3;
  int fan_in_repeats = 3;  // 0: no fan-in; NICs are then assumed at each rank's fastest link
  int uplink_repeats = 3;  // 0: no site uplinks measured
  double deadline_s = 30;  // per wait (round r of R waits D * (1 + r / 2R); see the .cpp)
  // Tests only: this rank answers the roll call, then never again.
  int silent_rank_for_testing = -1;
};

// Collective over `comm`. Returns the full network on rank 0 of `comm`
// (device d = rank d, sites by latency) and an empty Network elsewhere.
// Options must be the same on every rank.
plan::Network probe_network(MPI_Comm comm, const ProbeOptions& options);

}  // namespace geotrain::runtime
