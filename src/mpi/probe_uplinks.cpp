#include "probe_uplinks.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "geotrain/mpi/mpi_check.hpp"

namespace geotrain::runtime::probe {
namespace {

constexpr double kBinds = 1.2;  // together this much slower than alone: something shared binds (5% read noise as an uplink)

int site_count(const std::vector<int>& site_of_rank) {
  return site_of_rank.empty() ? 0 : *std::max_element(site_of_rank.begin(), site_of_rank.end()) + 1;
}

// One run: after a barrier every sender sends `bytes` at once; this rank's
// seconds from its barrier to its last message done (0 if idle).
double run_once(MPI_Comm comm, int rank, const std::vector<std::pair<int, int>>& pairs, int bytes,
                std::vector<char>& buffer, double deadline_s, const std::string& what) {
  MPI_Request barrier;
  GT_MPI_CHECK(MPI_Ibarrier(comm, &barrier));
  wait_collective_or_abort({&barrier, 1}, comm, -1, deadline_s, what);
  const double start = MPI_Wtime();
  std::vector<MPI_Request> requests;
  std::vector<int> peers;
  std::size_t slot = 1;  // slot 0 is what this rank sends
  for (const auto& [from, to] : pairs) {
    if (to != rank) continue;
    requests.emplace_back();
    peers.push_back(from);
    GT_MPI_CHECK(MPI_Irecv(buffer.data() + slot++ * bytes, bytes, MPI_BYTE, from, kUplinkData, comm, &requests.back()));
  }
  for (const auto& [from, to] : pairs) {
    if (from != rank) continue;
    requests.emplace_back();
    peers.push_back(to);
    GT_MPI_CHECK(MPI_Isend(buffer.data(), bytes, MPI_BYTE, to, kUplinkData, comm, &requests.back()));
  }
  if (requests.empty()) return 0.0;
  wait_each_or_abort(requests, peers, deadline_s, what, kSpinS);
  return MPI_Wtime() - start;
}

}  // namespace

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::vector<std::pair<int, int>> uplink_pairs(const std::vector<int>& site_of_rank, int s, bool outbound) {
  std::vector<int> inside, elsewhere;
  for (int r = 0; r < static_cast<int>(site_of_rank.size()); ++r) (site_of_rank[r] == s ? inside : elsewhere).push_back(r);
  std::vector<std::pair<int, int>> pairs;
  if (elsewhere.empty()) return pairs;
  for (std::size_t i = 0; i < inside.size(); ++i) {
    const int far = elsewhere[i % elsewhere.size()];
    pairs.push_back(outbound ? std::make_pair(inside[i], far) : std::make_pair(far, inside[i]));
  }
  return pairs;
}

std::int64_t uplink_chunk(const ProbeOptions& o, const std::vector<int>& site_of_rank) {
  std::size_t most = 1;  // messages one rank receives in one run
  for (int s = 0; s < site_count(site_of_rank); ++s) {
    for (bool outbound : {true, false}) {
      std::vector<std::size_t> in(site_of_rank.size(), 0);
      for (const auto& pair : uplink_pairs(site_of_rank, s, outbound)) most = std::max(most, ++in[pair.second]);
    }
  }
  const std::int64_t fits = (std::int64_t{16} << 20) / static_cast<std::int64_t>(most);
  return std::max<std::int64_t>(1, std::min<std::int64_t>(o.large_bytes, fits));
}

std::vector<UplinkTimes> uplink_times(MPI_Comm comm, const std::vector<int>& site_of_rank, const ProbeOptions& o) {
  int rank = 0;
  GT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  const std::int64_t chunk = uplink_chunk(o, site_of_rank);
  std::vector<char> buffer(static_cast<std::size_t>(chunk) * (site_of_rank.size() + 1), 'u');
  // Every run's time on this rank: [site, direction, together/alone, repeat, full/half].
  const int directions = 2 * site_count(site_of_rank), repeats = o.uplink_repeats;
  std::vector<double> runs;
  for (int e = 0; e < directions; ++e) {
    const auto pairs = uplink_pairs(site_of_rank, e / 2, e % 2 == 0);
    const std::string what = "the uplink probe of site " + std::to_string(e / 2) + (e % 2 ? ", inbound" : ", outbound");
    for (const auto& senders : {pairs, std::vector<std::pair<int, int>>(pairs.begin(), pairs.begin() + 1)}) {
      for (int repeat = 0; repeat < repeats; ++repeat) {
        for (const std::int64_t bytes : {chunk, chunk / 2}) {
          runs.push_back(run_once(comm, rank, senders, static_cast<int>(bytes), buffer, o.deadline_s, what));
        }
      }
    }
  }
  // A run lasts until its slowest rank is done.
  std::vector<double> slowest(rank == 0 ? runs.size() : 0);
  MPI_Request request;
  GT_MPI_CHECK(MPI_Ireduce(runs.data(), slowest.data(), static_cast<int>(runs.size()), MPI_DOUBLE, MPI_MAX, 0, comm,
                           &request));
  wait_collective_or_abort({&request, 1}, comm, 0, 2 * o.deadline_s, "gathering the uplink probe's times on rank 0");
  std::vector<UplinkTimes> times;
  for (std::size_t at = 0; at < slowest.size(); at += 4 * static_cast<std::size_t>(repeats)) {
    auto half_chunk_s = [&](std::size_t first) {
      std::vector<double> differences;
      for (int r = 0; r < repeats; ++r) differences.push_back(slowest[first + 2 * r] - slowest[first + 2 * r + 1]);
      return median(differences);
    };
    times.push_back({half_chunk_s(at), half_chunk_s(at + 2 * static_cast<std::size_t>(repeats))});
  }
  return times;
}

void set_probed_uplinks(plan::Network& net, const std::vector<int>& site_of_rank, const std::vector<UplinkTimes>& times,
                        double bytes_each) {
  // The larger of the two directions where both bind: the model keeps one
  // rate per site, and a run that lost packets in a queue only ever reads slower.
  std::vector<double> uplink(static_cast<std::size_t>(site_count(site_of_rank)), 0.0);
  for (std::size_t s = 0; s < uplink.size(); ++s) {
    for (bool outbound : {true, false}) {
      const UplinkTimes& t = times[2 * s + (outbound ? 0 : 1)];
      const auto senders = uplink_pairs(site_of_rank, static_cast<int>(s), outbound).size();
      if (senders > 1 && t.alone_s > 0 && t.together_s > kBinds * t.alone_s) {
        uplink[s] = std::max(uplink[s], static_cast<double>(senders) * bytes_each / t.together_s);
      }
    }
    if (uplink[s] == 0) uplink[s] = std::numeric_limits<double>::infinity();  // neither direction binds
  }
  if (std::none_of(uplink.begin(), uplink.end(), [](double u) { return std::isfinite(u); })) return;
  for (int r = 0; r < static_cast<int>(site_of_rank.size()); ++r) {
    const double site = uplink[static_cast<std::size_t>(site_of_rank[r])];
    if (!std::isfinite(site)) {
      net.shared.site_uplink_bytes_per_s[net.site(r)] += net.shared.nic_bytes_per_s.at(static_cast<std::size_t>(r));
      continue;
    }
    const double scale = std::pow(10.0, std::floor(std::log10(site)) - 3);
    net.shared.site_uplink_bytes_per_s[net.site(r)] = std::round(site / scale) * scale;
  }
}

}  // namespace geotrain::runtime::probe
