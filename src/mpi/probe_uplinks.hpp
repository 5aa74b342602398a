// geotrain probe's site uplinks (mpi_probe.cpp). With ranks at two or more
// sites (plan::sites_by_latency), each site's ranks send to other sites'
// ranks all at once, then one of them alone, and the same inbound. Ranks
// that together take longer than one alone (by 20%) share something beyond
// their pair links: the site's uplink, at the rate their bytes went through.
// The pair matrix cannot tell it: the tournament measures pairs of the
// same round at once, so two pairs crossing one uplink each see half of it.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "geotrain/mpi/mpi_probe.hpp"
#include "geotrain/plan/network.hpp"

namespace geotrain::runtime::probe {

// The probe's message tags, one list for all its parts.
enum Tag : int { kRollCall = 1001, kGo, kWarm, kLatency, kLatencyResult, kBulk, kAck, kFanGo, kFanData, kUplinkData = 1201 };

inline constexpr double kSpinS = 0.05;  // timed waits spin (yielding) this long before sleeping

// The middle value (the mean of the two middle ones for an even count).
double median(std::vector<double> values);

// Site s's experiment as (sender, receiver) ranks: outbound, its i-th rank
// sends to the (i mod k)-th of the k ranks elsewhere (a rank each where
// there are as many); inbound, the reverse of that.
std::vector<std::pair<int, int>> uplink_pairs(const std::vector<int>& site_of_rank, int s, bool outbound);

// The bytes each sender sends: large_bytes, or less so that the rank that
// receives most holds at most 16 MiB.
std::int64_t uplink_chunk(const ProbeOptions& options, const std::vector<int>& site_of_rank);

// What rank 0 learns of one site and direction: the seconds of half a chunk
// each, the site's ranks together and the first of them alone.
struct UplinkTimes {
  double together_s = 0, alone_s = 0;
};

// Collective. Per site, outbound then inbound, together then alone, each
// `uplink_repeats` times with full and half chunks: per repeat the slowest
// rank's full run less its half run (the go's and the last byte's latency
// cancel), the median over the repeats (a run's first burst into an idle
// queue can be fast). On rank 0: per site, outbound at 2s, inbound at
// 2s + 1; empty elsewhere.
std::vector<UplinkTimes> uplink_times(MPI_Comm comm, const std::vector<int>& site_of_rank, const ProbeOptions& options);

// Rank 0: each site's uplink where its ranks together took over 20% longer
// than one alone: their bytes over their time (the larger of the two
// directions where both bind), rounded to 4 digits. When some site has one, the others get their
// ranks' NICs together (what they carried at least, never binding beyond
// them); when none has, nothing is written.
void set_probed_uplinks(plan::Network& net, const std::vector<int>& site_of_rank, const std::vector<UplinkTimes>& times,
                        double bytes_each);

}  // namespace geotrain::runtime::probe
