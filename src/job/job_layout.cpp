#include "geotrain/job/job_layout.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "geotrain/common/errors.hpp"
#include "geotrain/io/config_plan.hpp"
#include "geotrain/plan/layout_search.hpp"
#include "geotrain/plan/plan_codec.hpp"
#include "geotrain/mpi/mpi_check.hpp"
#include "geotrain/mpi/mpi_plan.hpp"

namespace geotrain::runtime {
namespace {

// Training kernels reach about half of a large GEMM's speed on the shapes
// the probe uses (an assumption: it scales compute against communication in
// the search, not one device against another).
constexpr double kTrainingShareOfGemm = 0.5;

std::string to_string(const std::vector<std::uint8_t>& bytes) { return std::string(bytes.begin(), bytes.end()); }

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
  plan::SimulationConfig s = io::simulation_config(c, model, global_batch_sequences);
  s.efficiency = kTrainingShareOfGemm;
  return s;
}

namespace {

// Collective: rank 0's layout (or its error, a whole message) to every rank,
// checked there: the layers add up to the model's (when given), the flush
// divides the micro-batches; `rank_tflops` travels with it (may be empty).
JobLayout deliver_layout(JobLayout layout, const std::string& error, int model_layers, double deadline_s) {
  int ranks = 1;
  GT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &ranks));
  const auto verdict = broadcast_bytes(MPI_COMM_WORLD, std::vector<std::uint8_t>(error.begin(), error.end()), 0,
                                       deadline_s, "receiving the layout's verdict");
  if (!verdict.empty()) {
    layout.error.assign(verdict.begin(), verdict.end());
    return layout;
  }
  layout.plan = broadcast_plan(MPI_COMM_WORLD, layout.plan, deadline_s);
  layout.source = to_string(broadcast_bytes(MPI_COMM_WORLD, std::vector<std::uint8_t>(layout.source.begin(), layout.source.end()),
                                            0, deadline_s, "receiving the layout's source"));
  layout.rank_tflops.resize(static_cast<std::size_t>(ranks), 0.0);
  decode_extras(to_doubles(broadcast_bytes(MPI_COMM_WORLD, to_bytes(encode_extras(layout)), 0, deadline_s,
                                           "receiving the layout from rank 0")),
                ranks, layout);
  int total_layers = 0;
  for (int l : layout.layers_per_stage) total_layers += l;
  const bool split_given = !layout.layers_per_stage.empty();
  if ((split_given && total_layers != model_layers) || layout.micro_batch_sequences < 1 || layout.micro_batches < 1 ||
      layout.micro_batches_per_flush < 1 || layout.micro_batches % layout.micro_batches_per_flush != 0) {
    abort_all("layout from rank 0 rejected: " + std::to_string(total_layers) + " layers (the model has " +
              std::to_string(model_layers) + "), " + std::to_string(layout.micro_batches) + " micro-batches in flushes of " +
              std::to_string(layout.micro_batches_per_flush));
  }
  return layout;
}

}  // namespace

JobLayout search_job_layout(const io::Config& config, const ModelShape& model, plan::Network& network,
                            kernels::Backend& backend, int global_batch_sequences, double deadline_s) {
  int rank = 0;
  GT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  const double slowdown =
      static_cast<std::size_t>(rank) < config.emulation.compute_slowdown.size() ? config.emulation.compute_slowdown[rank] : 1.0;
  const std::vector<DeviceMeasurement> devices = measure_devices(backend, config.device.matmul_precision, slowdown, deadline_s);
  const std::vector<int> hosts = host_of_rank(MPI_COMM_WORLD, deadline_s);
  JobLayout layout;
  std::string error;
  if (rank == 0) {
    for (const DeviceMeasurement& d : devices) layout.rank_tflops.push_back(d.tflops);
    if (!network.typed()) set_measured_types(network, devices);
    const plan::LayoutOptions options = io::layout_search_options(config);
    // Tensor-parallel units form inside a node: the probe's hosts, where the
    // network (a probed one) names no nodes.
    if (network.node_of_device.empty() && static_cast<int>(hosts.size()) == network.device_count) {
      for (int host : hosts) network.node_of_device.push_back("host-of-rank-" + std::to_string(host));
    }
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
      error = config.error("pipeline.layout", std::string("auto: ") + e.what() + " (network: " +
                           (config.network.matrix.empty() ? std::string("probed") : config.network.matrix) + ")")
                  .what();
    }
  }
  layout = deliver_layout(std::move(layout), error, model.layers, deadline_s);
  const long long batch = static_cast<long long>(layout.micro_batch_sequences) * layout.micro_batches *
                          layout.plan.data_parallel;
  if (layout.error.empty() && batch != global_batch_sequences) {
    abort_all("layout from rank 0 rejected: " + std::to_string(batch) + " sequences per step, the batch is " +
              std::to_string(global_batch_sequences));
  }
  return layout;
}

JobLayout plan_file_layout(const io::Config& config, const ModelShape& model, double deadline_s) {
  int rank = 0, ranks = 1;
  GT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  GT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &ranks));
  JobLayout layout;
  std::string error;
  if (rank == 0) {
    try {
      layout = read_plan_file(config, model, ranks);
      layout.source = config.pipeline.plan_file;
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  return deliver_layout(std::move(layout), error, model.layers, deadline_s);
}

JobLayout read_plan_file(const io::Config& config, const ModelShape& model, int ranks) {
  const std::string& path = config.pipeline.plan_file;
  auto fail = [&](const std::string& field, const std::string& what) {
    throw InputError(path + ": " + field + ": " + what);
  };
  std::ifstream in(path);
  if (!in) throw config.error("pipeline.plan_file", path + ": cannot open file");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw InputError(path + ": not JSON (write it with geotrain plan ... --json): " + e.what());
  }
  auto integer = [&](const char* field) -> int {
    if (!j.contains(field) || !j[field].is_number_integer() || j[field].get<long long>() < 1 ||
        j[field].get<long long>() > 1000000) {
      fail(field, "missing or not a positive integer");
    }
    return j[field].get<int>();
  };
  JobLayout l;
  if (integer("devices") != ranks) {
    fail("devices", "the plan is for " + std::to_string(j["devices"].get<int>()) + " devices but the job has " +
                        std::to_string(ranks) + " ranks");
  }
  l.plan.pipeline_stages = integer("pp");
  l.plan.data_parallel = integer("dp");
  l.plan.tensor_parallel = j.contains("tp") ? integer("tp") : 1;
  try {
    l.plan.stages = j.at("stages").get<std::vector<std::vector<int>>>();
    if (l.plan.tensor_parallel > 1) {
      l.plan.tensor_groups = j.at("tensor_groups").get<std::vector<std::vector<int>>>();
    }
    plan::decode_plan(plan::encode_plan(l.plan), ranks);
  } catch (const std::exception& e) {
    fail(l.plan.tensor_parallel > 1 ? "stages, tensor_groups" : "stages", e.what());
  }
  if (l.plan.tensor_parallel > 1 && model.heads % l.plan.tensor_parallel != 0) {
    fail("tp", std::to_string(l.plan.tensor_parallel) + " does not divide the " + std::to_string(model.heads) +
                   " heads of " + model.name);
  }
  if (j.contains("schedule") && j["schedule"].is_string() &&
      j["schedule"].get<std::string>() != plan::to_string(config.pipeline.schedule)) {
    fail("schedule", "the plan is for " + j["schedule"].get<std::string>() + " but pipeline.schedule is " +
                         plan::to_string(config.pipeline.schedule) + " (set --pipeline.schedule=" +
                         j["schedule"].get<std::string>() + ")");
  }
  // A plan without a layout (geotrain plan without --layout auto or --model)
  // keeps the config's micro-batches and the even split.
  l.micro_batch_sequences = j.contains("micro_batch_sequences") ? integer("micro_batch_sequences") : config.train.micro_batch_sequences;
  l.micro_batches = j.contains("micro_batches") ? integer("micro_batches") : config.train.gradient_accumulation;
  l.micro_batches_per_flush = j.contains("micro_batches_per_flush") ? integer("micro_batches_per_flush") : l.micro_batches;
  if (j.contains("layers_per_stage")) {
    try {
      l.layers_per_stage = j["layers_per_stage"].get<std::vector<int>>();
    } catch (const std::exception& e) {
      fail("layers_per_stage", e.what());
    }
    int total = 0;
    for (int layers : l.layers_per_stage) total += layers;
    if (static_cast<int>(l.layers_per_stage.size()) != l.plan.pipeline_stages || total != model.layers ||
        *std::min_element(l.layers_per_stage.begin(), l.layers_per_stage.end()) < 1) {
      fail("layers_per_stage", "does not split the " + std::to_string(model.layers) + " layers of " + model.name +
                                   " over " + std::to_string(l.plan.pipeline_stages) +
                                   " stages (plan for this model: geotrain plan --model <its file>)");
    }
  }
  if (l.micro_batches_per_flush > l.micro_batches || l.micro_batches % l.micro_batches_per_flush != 0) {
    fail("micro_batches_per_flush", "does not divide micro_batches");
  }
  if (j.contains("predicted_iteration_s") && j["predicted_iteration_s"].is_number()) {
    l.predicted_iteration_s = j["predicted_iteration_s"].get<double>();
  }
  return l;
}

std::string describe(const JobLayout& l) {
  std::ostringstream out;
  out << "layout (" << (l.source == "auto" ? "auto" : "plan file " + l.source) << "): ";
  if (l.plan.tensor_parallel > 1) out << l.plan.tensor_parallel << "-way tensor-parallel units x ";
  out << l.plan.pipeline_stages << " stages x " << l.plan.data_parallel << " replicas, "
      << l.micro_batches << " micro-batches of " << l.micro_batch_sequences << " sequences per replica";
  if (l.micro_batches_per_flush < l.micro_batches) out << " in flushes of " << l.micro_batches_per_flush;
  out << ", layers [";
  for (std::size_t s = 0; s < l.layers_per_stage.size(); ++s) out << (s ? " " : "") << l.layers_per_stage[s];
  out << (l.layers_per_stage.empty() ? "even]" : "]");  // the idle ranks: the plan's lines below
  char predicted[64];
  std::snprintf(predicted, sizeof predicted, "; predicted %.4g s per step\n", l.predicted_iteration_s);
  out << predicted;
  if (l.source != "auto") return out.str();
  out << "  measured GEMM TFLOPS per rank:";
  for (double t : l.rank_tflops) {
    char value[32];
    std::snprintf(value, sizeof value, " %.3g", t);
    out << value;
  }
  out << "\n";
  return out.str();
}

std::string idle_reason(const JobLayout& l, int rank) {
  if (l.source != "auto") return "idle: the plan in " + l.source + " leaves this rank out; it leaves the job now";
  const double fastest = l.rank_tflops.empty() ? 0 : *std::max_element(l.rank_tflops.begin(), l.rank_tflops.end());
  const double own = static_cast<std::size_t>(rank) < l.rank_tflops.size() ? l.rank_tflops[rank] : 0;
  char line[320];
  std::snprintf(line, sizeof line,
                "idle: the layout search's best layout (%d stages x %d replicas, predicted %.4g s per step) leaves "
                "this rank out (measured %.3g TFLOPS, the fastest rank %.3g); it leaves the job now",
                l.plan.pipeline_stages, l.plan.data_parallel, l.predicted_iteration_s, own, fastest);
  return line;
}

std::vector<plan::DataParallelScheme> faster_exchanges(const plan::Network& network, const plan::Plan& plan,
                                                       const ModelShape& model,
                                                       const std::vector<model::StageSpec>& stages) {
  std::vector<plan::DataParallelScheme> schemes;
  for (int s = 0; s < plan.pipeline_stages; ++s) {
    const model::StageSpec& spec = stages.at(static_cast<std::size_t>(s));
    const double bytes = sizeof(float) * plan::stage_parameters_per_rank(model, spec.last_layer - spec.first_layer,
                                                                         spec.has_embedding, spec.has_head,
                                                                         std::max(1, plan.tensor_parallel));
    std::vector<int> members;
    for (int unit : plan.stages[static_cast<std::size_t>(s)]) members.push_back(plan.ranks_of_unit(unit).front());
    schemes.push_back(plan::group_scheme(network, members, bytes, plan::DataParallelScheme::automatic));
  }
  return schemes;
}

}  // namespace geotrain::runtime
