#include "geotrain/runtime/job_layout.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <sstream>

#include "geotrain/plan/layout_search.hpp"
#include "geotrain/runtime/mpi_check.hpp"
#include "geotrain/runtime/mpi_plan.hpp"

namespace geotrain::runtime {
namespace {

// Training kernels reach about half of a large GEMM's speed on the shapes
// the probe uses (an assumption: it scales compute against communication in
// the search, not one device against another).
constexpr double kTrainingShareOfGemm = 0.5;

std::optional<WireEncoding> encoding(const io::Config& c, WireFormat format) {
  if (format == WireFormat::fp32) return std::nullopt;
  return WireEncoding{format, c.compression_group_size, c.compression_topk_fraction};
}

std::vector<std::uint8_t> to_bytes(const std::vector<double>& values) {
  std::vector<std::uint8_t> bytes(values.size() * sizeof(double));
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

std::vector<double> to_doubles(const std::vector<std::uint8_t>& bytes) {
  std::vector<double> values(bytes.size() / sizeof(double));
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), values.size() * sizeof(double));
  return values;
}

int ranks_on_this_host() {
  MPI_Comm host = MPI_COMM_NULL;
  GT_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host));
  int size = 1;
  GT_MPI_CHECK(MPI_Comm_size(host, &size));
  GT_MPI_CHECK(MPI_Comm_free(&host));
  return size;
}

// Rank 0: the layout as numbers (micro-batch, count, prediction, stages and
// their layers, every rank's speed); the plan goes separately.
std::vector<double> encode_extras(const JobLayout& l) {
  std::vector<double> v = {static_cast<double>(l.micro_batch_sequences), static_cast<double>(l.micro_batches),
                           static_cast<double>(l.micro_batches_per_flush), l.predicted_iteration_s,
                           static_cast<double>(l.layers_per_stage.size())};
  for (int layers : l.layers_per_stage) v.push_back(layers);
  v.insert(v.end(), l.rank_tflops.begin(), l.rank_tflops.end());
  return v;
}

void decode_extras(const std::vector<double>& v, int ranks, JobLayout& l) {
  constexpr std::size_t head = 5;
  if (v.size() < head || v[head - 1] != static_cast<double>(l.plan.pipeline_stages) ||
      v.size() != head + static_cast<std::size_t>(l.plan.pipeline_stages) + static_cast<std::size_t>(ranks)) {
    abort_all("layout from rank 0 rejected: " + std::to_string(v.size()) + " numbers do not fit " +
              std::to_string(l.plan.pipeline_stages) + " stages and " + std::to_string(ranks) + " ranks");
  }
  l.micro_batch_sequences = static_cast<int>(v[0]);
  l.micro_batches = static_cast<int>(v[1]);
  l.micro_batches_per_flush = static_cast<int>(v[2]);
  l.predicted_iteration_s = v[3];
  l.layers_per_stage.assign(v.begin() + head, v.begin() + head + l.plan.pipeline_stages);
  l.rank_tflops.assign(v.end() - ranks, v.end());
}

}  // namespace

std::vector<DeviceMeasurement> measure_devices(kernels::Backend& backend, MatmulPrecision precision, double slowdown,
                                               double deadline_s) {
  const DeviceMeasurement own = measure_device(backend, precision, slowdown, ranks_on_this_host());
  const auto parts = gather_bytes(MPI_COMM_WORLD, to_bytes({own.tflops, own.memory_bytes}), 0, deadline_s,
                                  "gathering the device measurements");
  std::vector<DeviceMeasurement> devices;
  for (const auto& part : parts) {
    const std::vector<double> v = to_doubles(part);
    if (v.size() != 2) abort_all("device measurement of another rank is malformed");
    devices.push_back({v[0], v[1]});
  }
  return devices;
}

plan::SimulationConfig job_simulation_config(const io::Config& c, const ModelShape& model, int global_batch_sequences) {
  plan::SimulationConfig s;
  s.model = plan::TrainingShape(model, static_cast<double>(global_batch_sequences) * model.sequence_length, 4, 4);
  s.model.wire = {encoding(c, c.activation_wire), encoding(c, c.activation_gradient_wire), encoding(c, c.gradient_wire)};
  s.model.outer = io::outer_sync(c);
  s.global_batch_sequences = global_batch_sequences;
  s.micro_batch_sequences = c.micro_batch_sequences;
  s.micro_batches_per_flush = c.micro_batches_per_flush;  // 0: one flush
  s.efficiency = kTrainingShareOfGemm;
  s.schedule = c.pipeline_schedule;
  s.dp_scheme = plan::DataParallelScheme::direct;  // what MpiCollectives does
  s.recompute = false;
  s.overlap_communication = true;
  s.lm_head = true;
  s.tied_head = model.tied_head;
  s.gradient_bucket_mb = c.gradient_bucket_mb;
  return s;
}

JobLayout search_job_layout(const io::Config& config, const ModelShape& model, plan::Network& network,
                            kernels::Backend& backend, int global_batch_sequences, double deadline_s) {
  int rank = 0, ranks = 1;
  GT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  GT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &ranks));
  const double slowdown =
      static_cast<std::size_t>(rank) < config.compute_slowdown.size() ? config.compute_slowdown[rank] : 1.0;
  const std::vector<DeviceMeasurement> devices = measure_devices(backend, config.matmul_precision, slowdown, deadline_s);
  JobLayout layout;
  std::string error;
  if (rank == 0) {
    for (const DeviceMeasurement& d : devices) layout.rank_tflops.push_back(d.tflops);
    if (!network.typed()) set_measured_types(network, devices);
    plan::LayoutOptions options;
    options.placement.seed = config.seed;
    options.placement.candidates = config.plan_candidates;
    try {
      const plan::Layout found =
          plan::search_layout(network, job_simulation_config(config, model, global_batch_sequences), options);
      layout.plan = found.plan;
      layout.layers_per_stage = found.layers_per_stage;
      layout.micro_batch_sequences = found.micro_batch_sequences;
      layout.micro_batches = found.micro_batches;
      layout.micro_batches_per_flush = found.micro_batches_per_flush;
      layout.predicted_iteration_s = found.simulation.iteration_s;
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  const auto verdict = broadcast_bytes(MPI_COMM_WORLD, std::vector<std::uint8_t>(error.begin(), error.end()), 0,
                                       deadline_s, "receiving the layout search's verdict");
  if (!verdict.empty()) {
    layout.error.assign(verdict.begin(), verdict.end());
    return layout;
  }
  layout.plan = broadcast_plan(MPI_COMM_WORLD, layout.plan, deadline_s);
  decode_extras(to_doubles(broadcast_bytes(MPI_COMM_WORLD, to_bytes(encode_extras(layout)), 0, deadline_s,
                                           "receiving the layout from rank 0")),
                ranks, layout);
  std::vector<char> used(static_cast<std::size_t>(ranks), 0);
  for (const auto& stage : layout.plan.stages) {
    for (int d : stage) used[static_cast<std::size_t>(d)] = 1;
  }
  for (int r = 0; r < ranks; ++r) {
    if (!used[static_cast<std::size_t>(r)]) layout.idle_ranks.push_back(r);
  }
  int total_layers = 0;
  for (int l : layout.layers_per_stage) total_layers += l;
  const long long batch = static_cast<long long>(layout.micro_batch_sequences) * layout.micro_batches *
                          layout.plan.data_parallel;
  if (total_layers != model.layers || batch != global_batch_sequences || layout.micro_batches_per_flush < 1 ||
      layout.micro_batches % layout.micro_batches_per_flush != 0) {
    abort_all("layout from rank 0 rejected: " + std::to_string(total_layers) + " layers, " + std::to_string(batch) +
              " sequences per step (the model has " + std::to_string(model.layers) + ", the batch is " +
              std::to_string(global_batch_sequences) + ")");
  }
  return layout;
}

std::string describe(const JobLayout& l) {
  std::ostringstream out;
  out << "layout (auto): " << l.plan.pipeline_stages << " stages x " << l.plan.data_parallel << " replicas, "
      << l.micro_batches << " micro-batches of " << l.micro_batch_sequences << " sequences per replica";
  if (l.micro_batches_per_flush < l.micro_batches) out << " in flushes of " << l.micro_batches_per_flush;
  out << ", layers [";
  for (std::size_t s = 0; s < l.layers_per_stage.size(); ++s) out << (s ? " " : "") << l.layers_per_stage[s];
  out << "]";
  if (!l.idle_ranks.empty()) {
    out << ", idle ranks";
    for (int r : l.idle_ranks) out << " " << r;
  }
  char predicted[64];
  std::snprintf(predicted, sizeof predicted, "; predicted %.4g s per step\n", l.predicted_iteration_s);
  out << predicted << "  measured GEMM TFLOPS per rank:";
  for (double t : l.rank_tflops) {
    char value[32];
    std::snprintf(value, sizeof value, " %.3g", t);
    out << value;
  }
  out << "\n";
  return out.str();
}

std::string idle_reason(const JobLayout& l, int rank) {
  const double fastest = l.rank_tflops.empty() ? 0 : *std::max_element(l.rank_tflops.begin(), l.rank_tflops.end());
  const double own = static_cast<std::size_t>(rank) < l.rank_tflops.size() ? l.rank_tflops[rank] : 0;
  char line[320];
  std::snprintf(line, sizeof line,
                "idle: the layout search's best layout (%d stages x %d replicas, predicted %.4g s per step) leaves "
                "this rank out (measured %.3g TFLOPS, the fastest rank %.3g); it leaves the job now",
                l.plan.pipeline_stages, l.plan.data_parallel, l.predicted_iteration_s, own, fastest);
  return line;
}

}  // namespace geotrain::runtime
