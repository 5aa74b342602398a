#include "geotrain/io/timing_file.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <stdexcept>
#include <type_traits>

#include "geotrain/common/errors.hpp"
#include "hdf5_support.hpp"

namespace geotrain::io {
namespace {

namespace fs = std::filesystem;
using namespace hdf5;

hid_t event_kind_type() {
  const hid_t type = H5Tenum_create(H5T_STD_I8LE);
  for (int k = 0; k < kEventKinds; ++k) {
    const auto value = static_cast<std::int8_t>(k);
    H5Tenum_insert(type, to_string(static_cast<EventKind>(k)), &value);
  }
  return type;
}

void write_events(hid_t file, const std::vector<TimingEvent>& events, const std::string& context) {
  Handle group(GT_H5_CHECK(H5Gcreate2(file, "events", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), context, false), H5Gclose);
  std::vector<std::int32_t> rank, step, micro, peer;
  std::vector<std::int8_t> kind;
  std::vector<double> start, end;
  std::vector<std::int64_t> bytes;
  for (const TimingEvent& e : events) {
    rank.push_back(e.rank), step.push_back(e.step), micro.push_back(e.micro_batch), peer.push_back(e.peer);
    kind.push_back(static_cast<std::int8_t>(e.kind));
    start.push_back(e.start_s), end.push_back(e.end_s), bytes.push_back(e.bytes);
  }
  write_ints(group, "rank", rank, "", context);
  write_ints(group, "step", step, "", context);
  write_ints(group, "micro_batch", micro, "", context);
  Handle kinds(event_kind_type(), H5Tclose);
  Handle memory_kinds(H5Tenum_create(H5T_NATIVE_INT8), H5Tclose);
  for (int k = 0; k < kEventKinds; ++k) {
    const auto value = static_cast<std::int8_t>(k);
    H5Tenum_insert(memory_kinds, to_string(static_cast<EventKind>(k)), &value);
  }
  write_array(group, "kind", {static_cast<hsize_t>(kind.size())}, kinds, memory_kinds, kind.data(), "", context);
  write_doubles(group, "start", start, "s", context);
  write_doubles(group, "end", end, "s", context);
  write_int64s(group, "bytes", bytes, "bytes", context);
  write_ints(group, "peer", peer, "", context);
}

void write_file(const std::string& path, const TimingRun& r) {
  const std::string context = path;
  Handle file(GT_H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), context, false), H5Fclose);
  write_string_attribute(file, "format", "geotrain-timing", context);
  write_int_attribute(file, "format_version", kTimingFormatVersion, context);
  write_string_attribute(file, "writer", "geotrain 0.1.0", context);
  write_string_attribute(file, "time_unit", "s", context);
  write_string_attribute(file, "clock", "steady clock of each rank, from a barrier before the first step", context);
  write_string_attribute(file, "config", r.config_text, context);
  write_string_attribute(file, "layout", r.layout_text, context);
  write_string_attribute(file, "model_name", r.model_name, context);
  write_string_attribute(file, "device", r.device, context);
  write_string_attribute(file, "schedule", r.schedule, context);
  write_string_attribute(file, "placement", r.placement, context);
  write_int_attribute(file, "ranks", r.ranks, context);
  write_int_attribute(file, "pipeline_stages", r.pipeline_stages, context);
  write_int_attribute(file, "data_parallel", r.data_parallel, context);
  write_int_attribute(file, "micro_batches", r.micro_batches, context);
  write_int_attribute(file, "micro_batch_sequences", r.micro_batch_sequences, context);
  write_int_attribute(file, "sequence_length", r.sequence_length, context);
  write_int_attribute(file, "first_step", r.first_step, context);
  write_double_attribute(file, "tokens_per_step", r.tokens_per_step, context);
  write_double_attribute(file, "model_flops_per_token", r.model_flops_per_token, context);
  write_double_attribute(file, "device_peak_flops_per_s", r.device_peak_flops_per_s, context);

  write_events(file, r.events, context);

  Handle steps(GT_H5_CHECK(H5Gcreate2(file, "steps", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), context, false), H5Gclose);
  write_ints(steps, "step", r.step, "", context);
  write_doubles(steps, "loss", r.loss, "nats per token", context);
  write_doubles(steps, "learning_rate", r.learning_rate, "", context);
  write_doubles(steps, "grad_norm", r.grad_norm, "", context);
  {
    Handle validation(GT_H5_CHECK(H5Gcreate2(file, "validation", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), context, false),
                      H5Gclose);
    write_ints(validation, "step", r.validation_step, "", context);
    write_doubles(validation, "loss", r.validation_loss, "nats per token", context);
  }
  if (r.wall_time_s.size() != static_cast<std::size_t>(r.ranks) * r.step.size()) {
    throw std::logic_error("write_timing_file: wall_time_s must hold ranks x steps values");
  }
  write_doubles(steps, "wall_time", r.wall_time_s, "s", context,
                {static_cast<hsize_t>(r.ranks), static_cast<hsize_t>(r.step.size())});

  const auto n = static_cast<hsize_t>(r.ranks);
  Handle network(GT_H5_CHECK(H5Gcreate2(file, "network", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), context, false), H5Gclose);
  write_string_attribute(network, "source", r.network_source, context);
  write_doubles(network, "latency", r.latency_s, "s", context, {n, n});
  write_doubles(network, "bandwidth", r.bandwidth_bytes_per_s, "bytes/s", context, {n, n});
  write_strings(network, "site", r.site_of_rank, context);

  Handle plan(GT_H5_CHECK(H5Gcreate2(file, "plan", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), context, false), H5Gclose);
  write_string_attribute(plan, "text", r.plan_text, context);
  write_double_attribute(plan, "predicted_datap_s", r.predicted_datap_s, context);
  write_double_attribute(plan, "predicted_pipeline_s", r.predicted_pipeline_s, context);
  write_double_attribute(plan, "predicted_iteration_s", r.predicted_iteration_s, context);
  write_double_attribute(plan, "predicted_bubble_fraction", r.predicted_bubble_fraction, context);
  write_ints(plan, "stage_of_rank", r.stage_of_rank, "", context);
  write_ints(plan, "replica_of_rank", r.replica_of_rank, "", context);
  write_ints(plan, "devices", r.devices, "rank", context,
             {static_cast<hsize_t>(r.pipeline_stages), static_cast<hsize_t>(r.data_parallel)});
  write_doubles(plan, "forward_s", r.forward_s, "s", context);
  write_doubles(plan, "backward_s", r.backward_s, "s", context);
}

}  // namespace

const char* to_string(EventKind kind) {
  switch (kind) {
    case EventKind::forward: return "forward";
    case EventKind::backward: return "backward";
    case EventKind::send: return "send";
    case EventKind::recv: return "recv";
    case EventKind::idle: return "idle";
    case EventKind::allreduce: return "allreduce";
    case EventKind::optimizer: return "optimizer";
    case EventKind::data: return "data";
    case EventKind::evaluate: return "evaluate";
    case EventKind::checkpoint: return "checkpoint";
  }
  return "unknown";
}

void write_timing_file(const std::string& path, const TimingRun& run) {
  const auto hdf5_in_use = use_library();
  const fs::path target(path);
  std::error_code error;
  if (target.has_parent_path()) {
    fs::create_directories(target.parent_path(), error);
    if (error) throw RunError(path + ": cannot create its folder: " + error.message());
  }
  const std::string temporary = path + ".tmp";
  try {
    write_file(temporary, run);
  } catch (...) {
    fs::remove(temporary, error);
    throw;
  }
  fsync_path(temporary);
  fs::rename(temporary, path, error);
  if (error) throw RunError(temporary + ": cannot rename to " + path + ": " + error.message());
}

std::string expand_run_name(const std::string& pattern) {
  const std::string key = "{job}";
  const std::size_t at = pattern.find(key);
  if (at == std::string::npos) return pattern;
  // One name per process: the timing and metrics files of a run share it.
  static const std::string job = [] {
    if (const char* id = std::getenv("SLURM_JOB_ID"); id != nullptr && *id != '\0') return std::string(id);
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &local);
    return std::string(stamp) + "-" + std::to_string(::getpid());
  }();
  return pattern.substr(0, at) + job + pattern.substr(at + key.size());
}

static_assert(std::is_trivially_copyable_v<TimingEvent>);

std::vector<std::uint8_t> serialize_events(const std::vector<TimingEvent>& events) {
  std::vector<std::uint8_t> bytes(events.size() * sizeof(TimingEvent));
  if (!events.empty()) std::memcpy(bytes.data(), events.data(), bytes.size());
  return bytes;
}

std::vector<TimingEvent> deserialize_events(const std::vector<std::uint8_t>& bytes) {
  if (bytes.size() % sizeof(TimingEvent) != 0) throw std::invalid_argument("timing events: truncated message");
  std::vector<TimingEvent> events(bytes.size() / sizeof(TimingEvent));
  if (!events.empty()) std::memcpy(events.data(), bytes.data(), bytes.size());
  for (const TimingEvent& e : events) {
    const int kind = static_cast<int>(e.kind);
    if (kind < 0 || kind >= kEventKinds || !(e.end_s >= e.start_s)) {
      throw std::invalid_argument("timing events: malformed event");
    }
  }
  return events;
}

}  // namespace geotrain::io
