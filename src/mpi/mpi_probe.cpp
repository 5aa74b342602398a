#include "geotrain/mpi/mpi_probe.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "geotrain/plan/flow_sharing.hpp"
#include "geotrain/plan/tournament.hpp"
#include "geotrain/mpi/mpi_check.hpp"
#include "probe_uplinks.hpp"

namespace geotrain::runtime {

namespace {

using enum probe::Tag;
using probe::kSpinS;
using probe::median;

struct Pair {
  MPI_Comm comm;
  int peer;
  int round;
  double deadline_s;

  std::string what(const char* phase) const {
    return std::string(phase) + " with rank " + std::to_string(peer) + " (probe round " + std::to_string(round) + ")";
  }
  void send(const void* data, int bytes, int tag, const char* phase) const {
    MPI_Request r;
    GT_MPI_CHECK(MPI_Isend(data, bytes, MPI_BYTE, peer, tag, comm, &r));
    wait_all_or_abort({&r, 1}, deadline_s, what(phase), peer, kSpinS);
  }
  void recv(void* data, int bytes, int tag, const char* phase) const {
    MPI_Request r;
    GT_MPI_CHECK(MPI_Irecv(data, bytes, MPI_BYTE, peer, tag, comm, &r));
    wait_all_or_abort({&r, 1}, deadline_s, what(phase), peer, kSpinS);
  }
  // Send then receive (as one wait), returning the seconds it took.
  double send_recv(const void* out, int out_bytes, int out_tag, void* in, int in_bytes, int in_tag,
                   const char* phase) const {
    MPI_Request r[2];
    const double t0 = MPI_Wtime();
    GT_MPI_CHECK(MPI_Irecv(in, in_bytes, MPI_BYTE, peer, in_tag, comm, &r[1]));
    GT_MPI_CHECK(MPI_Isend(out, out_bytes, MPI_BYTE, peer, out_tag, comm, &r[0]));
    wait_all_or_abort(r, deadline_s, what(phase), peer, kSpinS);
    return MPI_Wtime() - t0;
  }
  // Receive then send back.
  void echo(void* in, int in_bytes, int in_tag, const void* out, int out_bytes, int out_tag,
            const char* phase) const {
    recv(in, in_bytes, in_tag, phase);
    send(out, out_bytes, out_tag, phase);
  }
};

// Latency (one way, s) and this rank's outgoing bandwidth (bytes/s) to the peer.
std::pair<double, double> measure_pair(const Pair& pair, bool leader, const ProbeOptions& o,
                                       std::vector<char>& large, std::vector<char>& small,
                                       std::vector<char>& small_in) {
  const int s = o.small_bytes;
  const int big = static_cast<int>(o.large_bytes);
  char ack = 0;
  // 1. Warm-up.
  for (int i = 0; i < o.warmup_round_trips; ++i) {
    if (leader) pair.send_recv(small.data(), s, kWarm, small_in.data(), s, kWarm, "warming up");
    else pair.echo(small_in.data(), s, kWarm, small.data(), s, kWarm, "warming up");
  }
  for (int direction = 0; direction < 2; ++direction) {
    const bool sending = (direction == 0) == leader;
    if (sending) pair.send_recv(large.data(), big, kWarm, &ack, 1, kWarm, "warming up");
    else pair.echo(large.data(), big, kWarm, &ack, 1, kWarm, "warming up");
  }
  // 2. Latency: the leader times the round trips and tells the other.
  double latency_s = 0;
  if (leader) {
    std::vector<double> rtt(o.latency_repeats);
    for (double& t : rtt) t = pair.send_recv(small.data(), s, kLatency, small_in.data(), s, kLatency, "measuring latency");
    latency_s = median(rtt) / 2;
    pair.send(&latency_s, sizeof latency_s, kLatencyResult, "sending the measured latency");
  } else {
    for (int i = 0; i < o.latency_repeats; ++i) {
      pair.echo(small_in.data(), s, kLatency, small.data(), s, kLatency, "measuring latency");
    }
    pair.recv(&latency_s, sizeof latency_s, kLatencyResult, "receiving the measured latency");
    if (!std::isfinite(latency_s) || latency_s < 0) {
      abort_all("probe message from rank " + std::to_string(pair.peer) + " rejected: latency " +
                std::to_string(latency_s) + " s is not a finite number >= 0");
    }
  }
  // 3. Bandwidth, leader -> other first; each direction timed by its sender.
  double bandwidth = 0;
  for (int direction = 0; direction < 2; ++direction) {
    const bool sending = (direction == 0) == leader;
    if (sending) {
      // Full and half messages alternately: the difference of their times is
      // the transfer of half the bytes, free of latency, the rendezvous
      // round trip of large messages and the ack.
      const int half = std::max(big / 2, 1);
      std::vector<double> full_s(o.bandwidth_repeats), half_s(o.bandwidth_repeats);
      for (int i = 0; i < o.bandwidth_repeats; ++i) {
        full_s[i] = pair.send_recv(large.data(), big, kBulk, &ack, 1, kAck, "measuring bandwidth");
        half_s[i] = pair.send_recv(large.data(), half, kBulk, &ack, 1, kAck, "measuring bandwidth");
      }
      // Minimums: contention (other pairs, other processes on the cores) only
      // ever adds time, so the fastest of each size is the least disturbed.
      const double full = median(full_s);
      const double difference = *std::min_element(full_s.begin(), full_s.end()) -
                                *std::min_element(half_s.begin(), half_s.end());
      if (difference > 0.1 * full) {
        bandwidth = static_cast<double>(big - half) / difference;
      } else {
        // Noise larger than the transfer (fast links): the full message's
        // time less the latency of it and of the ack, at least half of it.
        bandwidth = static_cast<double>(big) / std::max(std::max(full - 2 * latency_s, 0.5 * full), 1e-12);
      }
    } else {
      for (int i = 0; i < 2 * o.bandwidth_repeats; ++i) {
        pair.echo(large.data(), big, kBulk, &ack, 1, kAck, "measuring bandwidth");
      }
    }
  }
  return {latency_s, bandwidth};
}

// Who sends in the fan-in to `target`: the ranks of its site where it has
// two or more others (a fan-in from other sites would also cross the
// sites' uplinks, which would hold the far senders below what the NIC
// allows and hide it), else every other rank.
std::vector<int> fan_in_peers(const std::vector<int>& site_of_rank, int target) {
  std::vector<int> near, all;
  for (int r = 0; r < static_cast<int>(site_of_rank.size()); ++r) {
    if (r == target) continue;
    all.push_back(r);
    if (site_of_rank[r] == site_of_rank[target]) near.push_back(r);
  }
  return near.size() >= 2 ? near : all;
}

// The fan-in bytes each sender sends: 4 MiB (large_bytes) where the
// target's buffer stays within 16 MiB.
std::int64_t fan_in_chunk(const ProbeOptions& o, const std::vector<int>& site_of_rank) {
  std::size_t most = 1;
  for (int t = 0; t < static_cast<int>(site_of_rank.size()); ++t) most = std::max(most, fan_in_peers(site_of_rank, t).size());
  const std::int64_t fits = (std::int64_t{16} << 20) / static_cast<std::int64_t>(most);
  return std::max<std::int64_t>(1, std::min<std::int64_t>(o.large_bytes, fits));
}

// One fan-in to `target`: it posts its receives and tells its peers to go;
// they send `bytes` each at once. The target returns the seconds from its
// go to the last byte; the others return 0.
double fan_in_once(MPI_Comm comm, int rank, int target, const std::vector<int>& senders, int bytes,
                   std::vector<char>& buffer, double deadline_s) {
  char go = 1;
  const std::string what = "the fan-in to rank " + std::to_string(target) + " (network probe)";
  if (rank != target) {
    if (std::find(senders.begin(), senders.end(), rank) == senders.end()) return 0;
    MPI_Request request;
    GT_MPI_CHECK(MPI_Irecv(&go, 1, MPI_BYTE, target, kFanGo, comm, &request));
    wait_all_or_abort({&request, 1}, deadline_s, what, target, kSpinS);
    GT_MPI_CHECK(MPI_Isend(buffer.data(), bytes, MPI_BYTE, target, kFanData, comm, &request));
    wait_all_or_abort({&request, 1}, deadline_s, what, target, kSpinS);
    return 0;
  }
  std::vector<MPI_Request> requests;
  std::vector<int> peers;
  std::size_t slot = 0;
  for (int peer : senders) {
    requests.emplace_back();
    peers.push_back(peer);
    GT_MPI_CHECK(MPI_Irecv(buffer.data() + slot++ * bytes, bytes, MPI_BYTE, peer, kFanData, comm, &requests.back()));
  }
  const double start = MPI_Wtime();
  for (int peer : senders) {
    requests.emplace_back();
    peers.push_back(peer);
    GT_MPI_CHECK(MPI_Isend(&go, 1, MPI_BYTE, peer, kFanGo, comm, &requests.back()));
  }
  wait_each_or_abort(requests, peers, deadline_s, what, kSpinS);
  return MPI_Wtime() - start;
}

// 4. Fan-in, to each rank in turn: its peers (fan_in_peers) send to it at
// once, a full and a half chunk each time; per time the difference is the
// time of half a chunk each, free of the go's and the last byte's latency,
// and the median over the times is kept (one run that meets a lost packet
// or a busy core reads slow; a minimum of each size took one such run for
// the rate). Returns that time where this rank was the target (rank 0 turns
// it into a NIC rate: plan::fan_in_capacity).
double fan_in_seconds(MPI_Comm comm, int rank, const std::vector<int>& site_of_rank, const ProbeOptions& o) {
  const std::int64_t chunk = fan_in_chunk(o, site_of_rank);
  std::vector<char> buffer(static_cast<std::size_t>(chunk) * site_of_rank.size(), 'f');
  double own = 0;
  for (int target = 0; target < static_cast<int>(site_of_rank.size()); ++target) {
    const std::vector<int> senders = fan_in_peers(site_of_rank, target);
    std::vector<double> differences;
    for (int repeat = 0; repeat < o.fan_in_repeats; ++repeat) {
      const double full = fan_in_once(comm, rank, target, senders, static_cast<int>(chunk), buffer, o.deadline_s);
      const double half = fan_in_once(comm, rank, target, senders, static_cast<int>(chunk / 2), buffer, o.deadline_s);
      differences.push_back(full - half);
    }
    if (rank == target) own = median(differences);
  }
  return own;
}

// Whether the ranks run on more than one host: one host's ranks share its
// memory, not a NIC (a fan-in would measure the memory), so there its NICs
// are assumed at the fastest link, and the tests on one machine pay nothing.
bool spans_hosts(MPI_Comm comm, double deadline_s) {
  const unsigned long long hash = std::hash<std::string>{}(host_name());
  unsigned long long local[2] = {hash, ~hash}, global[2] = {0, 0};  // min of both: the smallest and ~the largest
  MPI_Request request;
  GT_MPI_CHECK(MPI_Iallreduce(local, global, 2, MPI_UNSIGNED_LONG_LONG, MPI_MIN, comm, &request));
  wait_collective_or_abort({&request, 1}, comm, -1, deadline_s, "comparing host names before the NIC probe");
  return global[0] != ~global[1];
}

// Every rank reports to rank 0; rank 0 names those that do not, then
// releases everyone. Non-root ranks wait twice as long, so a silent rank is
// named by rank 0 before anyone blames rank 0.
void roll_call(MPI_Comm comm, int rank, int size, double deadline_s) {
  int token = rank;
  if (rank == 0) {
    std::vector<int> tokens(size);
    std::vector<MPI_Request> requests;
    std::vector<int> peers;
    for (int r = 1; r < size; ++r) {
      requests.emplace_back();
      peers.push_back(r);
      GT_MPI_CHECK(MPI_Irecv(&tokens[r], 1, MPI_INT, r, kRollCall, comm, &requests.back()));
    }
    wait_each_or_abort(requests, peers, deadline_s, "taking the roll call before the network probe");
    requests.assign(size - 1, MPI_REQUEST_NULL);
    for (int r = 1; r < size; ++r) {
      if (tokens[r] != r) abort_all("probe roll call: rank " + std::to_string(r) + " answered as " + std::to_string(tokens[r]));
      GT_MPI_CHECK(MPI_Isend(&token, 1, MPI_INT, r, kGo, comm, &requests[r - 1]));
    }
    wait_each_or_abort(requests, peers, deadline_s, "starting the network probe");
  } else {
    MPI_Request requests[2];
    int go = -1;
    GT_MPI_CHECK(MPI_Isend(&token, 1, MPI_INT, 0, kRollCall, comm, &requests[0]));
    GT_MPI_CHECK(MPI_Irecv(&go, 1, MPI_INT, 0, kGo, comm, &requests[1]));
    wait_all_or_abort(requests, 2 * deadline_s, "waiting for rank 0 to start the network probe", 0);
  }
}

// Rank 0: the gathered rows (latencies, bandwidths, then the fan-in) and
// host names as the network, each entry checked.
plan::Network network_from_rows(const std::vector<double>& rows, std::size_t row_size, const std::vector<char>& hosts,
                                std::size_t host_size) {
  const int size = static_cast<int>(rows.size() / row_size);
  plan::Network net;
  net.device_count = size;
  net.latency_s.assign(static_cast<std::size_t>(size) * size, 0.0);
  net.bandwidth_bytes_per_s.assign(static_cast<std::size_t>(size) * size, 0.0);
  for (int u = 0; u < size; ++u) {
    const double* r = rows.data() + row_size * u;
    for (int v = 0; v < size; ++v) {
      const double latency = u == v ? 0.0 : r[v];
      const double bandwidth = u == v ? std::numeric_limits<double>::infinity() : r[size + v];
      if (u != v && (!std::isfinite(latency) || latency < 0 || !std::isfinite(bandwidth) || bandwidth <= 0)) {
        abort_all("probe row from rank " + std::to_string(u) + " rejected: link to rank " + std::to_string(v) +
                  " has latency " + std::to_string(latency) + " s, bandwidth " + std::to_string(bandwidth) + " B/s");
      }
      net.latency_s[u * size + v] = latency;
      net.bandwidth_bytes_per_s[u * size + v] = bandwidth;
    }
    const char* name = hosts.data() + host_size * u;
    const std::size_t length = strnlen(name, host_size);
    if (length == 0 || length == host_size) abort_all("probe: host name of rank " + std::to_string(u) + " is malformed");
    net.site_of_device.emplace_back(name, length);  // the host, until the sites are known
  }
  return net;
}

// Each site named by its first rank's host.
void name_sites_by_first_host(plan::Network& net, const std::vector<int>& site_of_rank) {
  std::vector<std::string> names;
  for (std::size_t r = 0; r < site_of_rank.size(); ++r) {
    if (site_of_rank[r] != static_cast<int>(names.size())) continue;
    std::string name = net.site_of_device[r];  // hosts of one name at two sites (containers): told apart
    if (std::find(names.begin(), names.end(), name) != names.end()) name += "-site" + std::to_string(names.size());
    names.push_back(name);
  }
  for (std::size_t r = 0; r < site_of_rank.size(); ++r) net.site_of_device[r] = names[site_of_rank[r]];
}

// Each rank's NIC from its fan-in: the rate at which the flow model takes
// the measured time, rounded as the pairs are.
void set_probed_nics(plan::Network& net, const std::vector<double>& seconds, const std::vector<int>& site_of_rank,
                     double bytes_each) {
  const int size = net.device_count;
  net.shared.nics = plan::NicSource::probed;
  net.shared.nic_bytes_per_s.assign(size, 0.0);
  for (int target = 0; target < size; ++target) {
    std::vector<double> pair_rates;
    for (int from : fan_in_peers(site_of_rank, target)) pair_rates.push_back(net.bandwidth(from, target));
    const double rate = plan::fan_in_capacity(pair_rates, bytes_each, seconds[target]);
    const double scale = std::pow(10.0, std::floor(std::log10(rate)) - 3);
    net.shared.nic_bytes_per_s[target] = std::round(rate / scale) * scale;
  }
}

// 1-3. This rank's row, [latency_s x N, bandwidth x N], over the tournament's
// rounds; the diagonal is 0 / 0 here and normalised by the Network's users.
std::vector<double> measure_row(MPI_Comm comm, int rank, int size, const ProbeOptions& o) {
  std::vector<double> row(2 * static_cast<std::size_t>(size), 0.0);
  std::vector<char> large(static_cast<std::size_t>(o.large_bytes), 'g'), small(o.small_bytes, 's'),
      small_in(o.small_bytes, 0);
  const int rounds = plan::tournament_rounds(size);
  for (int round = 0; round < rounds; ++round) {
    const int peer = plan::partner_in_round(size, rank, round);
    if (peer < 0) continue;
    if (rank == o.silent_rank_for_testing) {
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    // Deadlines grow slightly with the round (D up to 1.5 D): when a rank
    // stops answering in round r, its partner in round r times out before
    // the ranks of later rounds that wait, indirectly, on that partner, so
    // the first message names the silent rank.
    const Pair pair{comm, peer, round, o.deadline_s * (1.0 + round / (2.0 * rounds))};
    const auto [latency_s, bandwidth] = measure_pair(pair, rank < peer, o, large, small, small_in);
    // Keep what a measurement can tell: latency to 10 ns, bandwidth to 4
    // significant digits (the file then reads "0.00923", not 16 digits).
    // Rounded in the file's units (ms, Gbit/s), so the file shows them short.
    row[peer] = std::round(latency_s * 1e8) / 1e5 / 1000.0;
    const double gbps = bandwidth / plan::kBytesPerGbit;
    const double scale = std::pow(10.0, std::floor(std::log10(gbps)) - 3);
    row[size + peer] = std::round(gbps / scale) * scale * plan::kBytesPerGbit;
  }
  return row;
}

// Rank 0: every rank's row and host name as the network, sites by latency;
// every rank: the site of each rank.
std::vector<int> gather_network(MPI_Comm comm, int rank, int size, const std::vector<double>& row, double deadline_s,
                                plan::Network* net) {
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  std::strncpy(host, host_name().c_str(), sizeof host - 1);
  std::vector<double> rows(rank == 0 ? row.size() * size : 0);
  std::vector<char> hosts(rank == 0 ? sizeof host * size : 0);
  MPI_Request requests[2];
  GT_MPI_CHECK(MPI_Igather(row.data(), static_cast<int>(row.size()), MPI_DOUBLE, rows.data(),
                           static_cast<int>(row.size()), MPI_DOUBLE, 0, comm, &requests[0]));
  GT_MPI_CHECK(MPI_Igather(host, static_cast<int>(sizeof host), MPI_CHAR, hosts.data(), static_cast<int>(sizeof host),
                           MPI_CHAR, 0, comm, &requests[1]));
  // Rank 0 may be done while others still measure: it waits longest.
  wait_collective_or_abort(requests, comm, 0, 2 * deadline_s, "gathering the probed rows on rank 0");
  std::vector<int> site_of_rank(static_cast<std::size_t>(size), 0);
  if (rank == 0) {
    *net = network_from_rows(rows, row.size(), hosts, sizeof host);
    site_of_rank = plan::sites_by_latency(*net);
    name_sites_by_first_host(*net, site_of_rank);
  }
  MPI_Request request;
  GT_MPI_CHECK(MPI_Ibcast(site_of_rank.data(), size, MPI_INT, 0, comm, &request));
  wait_collective_or_abort({&request, 1}, comm, 0, 2 * deadline_s, "sending the sites to every rank");
  return site_of_rank;
}

}  // namespace

plan::Network probe_network(MPI_Comm comm, const ProbeOptions& o) {
  if (o.small_bytes < 1 || o.large_bytes < 1 || o.large_bytes > (1ll << 30) || o.latency_repeats < 1 ||
      o.bandwidth_repeats < 1 || o.warmup_round_trips < 0 || o.uplink_repeats < 0 || !(o.deadline_s > 0)) {
    abort_all("probe_network: invalid options (sizes, repeats and the deadline must be positive, at most 1 GiB)");
  }
  int rank = 0, size = 1;
  GT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  GT_MPI_CHECK(MPI_Comm_size(comm, &size));
  roll_call(comm, rank, size, o.deadline_s);
  plan::Network net;
  const std::vector<int> site_of_rank = gather_network(comm, rank, size, measure_row(comm, rank, size, o), o.deadline_s, &net);

  // Two ranks: the pair is all there is.
  const bool fans_in = size > 2 && o.fan_in_repeats > 0 && spans_hosts(comm, o.deadline_s);
  if (fans_in) {
    const double own = fan_in_seconds(comm, rank, site_of_rank, o);
    std::vector<double> seconds(rank == 0 ? size : 0);
    MPI_Request request;
    GT_MPI_CHECK(MPI_Igather(&own, 1, MPI_DOUBLE, seconds.data(), 1, MPI_DOUBLE, 0, comm, &request));
    wait_collective_or_abort({&request, 1}, comm, 0, 2 * o.deadline_s, "gathering the fan-in times on rank 0");
    if (rank == 0) set_probed_nics(net, seconds, site_of_rank, static_cast<double>(fan_in_chunk(o, site_of_rank) / 2));
  } else if (rank == 0) {
    plan::assume_nics_where_unstated(net);  // what a device sends at once shares its fastest link
  }
  const bool sites = std::any_of(site_of_rank.begin(), site_of_rank.end(), [](int s) { return s > 0; });
  if (sites && o.uplink_repeats > 0) {
    const std::vector<probe::UplinkTimes> times = probe::uplink_times(comm, site_of_rank, o);
    const double bytes_each = static_cast<double>(probe::uplink_chunk(o, site_of_rank) / 2);
    if (rank == 0) probe::set_probed_uplinks(net, site_of_rank, times, bytes_each);
  }
  return net;
}

}  // namespace geotrain::runtime
