// The timing file of a job under MPI: every training rank's step times and
// events gathered to the reporting rank, which writes the file.
#include "geotrain/job/job_timing.hpp"

#include <cstring>
#include <iostream>
#include <stdexcept>

#include "geotrain/mpi/mpi_check.hpp"

namespace geotrain::runtime {
namespace {

// One rank's RankTiming as bytes: parameters, step count, step times, events.
std::vector<std::uint8_t> pack_timing(const TrainResult& r) {
  std::vector<std::uint8_t> out(2 * sizeof(std::int64_t) + r.step_seconds.size() * sizeof(double));
  const std::int64_t header[2] = {r.stage_parameters, static_cast<std::int64_t>(r.step_seconds.size())};
  std::memcpy(out.data(), header, sizeof header);
  if (!r.step_seconds.empty()) std::memcpy(out.data() + sizeof header, r.step_seconds.data(), r.step_seconds.size() * sizeof(double));
  const std::vector<std::uint8_t> events = io::serialize_events(r.events);
  out.insert(out.end(), events.begin(), events.end());
  return out;
}

RankTiming unpack_timing(const std::vector<std::uint8_t>& bytes) {
  std::int64_t header[2] = {0, 0};
  if (bytes.size() < sizeof header) throw std::invalid_argument("timing message truncated");
  std::memcpy(header, bytes.data(), sizeof header);
  const std::size_t steps = static_cast<std::size_t>(header[1]);
  if (header[1] < 0 || steps > (bytes.size() - sizeof header) / sizeof(double)) {
    throw std::invalid_argument("timing message: bad step count");
  }
  RankTiming t;
  t.stage_parameters = header[0];
  t.step_seconds.resize(steps);
  if (steps > 0) std::memcpy(t.step_seconds.data(), bytes.data() + sizeof header, steps * sizeof(double));
  const auto events_at = bytes.begin() + static_cast<std::ptrdiff_t>(sizeof header + steps * sizeof(double));
  t.events = io::deserialize_events(std::vector<std::uint8_t>(events_at, bytes.end()));
  return t;
}

}  // namespace

bool write_job_timing(const std::string& path, const io::Config& config, const ModelShape& model,
                      const JobDescription& job, const TrainResult& result, const Topology& topology, int world_size,
                      double deadline_s) {
  MPI_Comm comm = topology.job_comm.get();
  const auto parts = gather_bytes(comm, pack_timing(result), 0, deadline_s, "gathering timing events");
  std::vector<std::uint8_t> verdict;
  if (!parts.empty()) {
    try {
      std::vector<RankTiming> ranks(static_cast<std::size_t>(world_size));
      for (std::size_t i = 0; i < parts.size(); ++i) ranks[topology.job_ranks[i]] = unpack_timing(parts[i]);
      io::write_timing_file(path, make_timing_run(config, model, job, result, ranks));
      verdict = {1};
    } catch (const std::exception& e) {
      std::cerr << "geotrain: error: timing file not written: " << e.what() << " (training itself finished)\n";
      verdict = {0};
    }
  }
  verdict = broadcast_bytes(comm, verdict, 0, deadline_s, "waiting for the reporting rank to write the timing file");
  return verdict.size() == 1 && verdict[0] == 1;
}

}  // namespace geotrain::runtime
