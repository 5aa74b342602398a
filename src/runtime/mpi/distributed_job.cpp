// geotrain train under mpirun / srun: the whole start-up and the training
// loop on every rank. Rank 0 prints; every rank fails together.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <utility>

#include "geotrain/io/checkpoint.hpp"
#include "geotrain/io/parallel_checkpoint.hpp"
#include "geotrain/common/errors.hpp"
#include "geotrain/io/model_file.hpp"
#include "geotrain/io/scenario.hpp"
#include "geotrain/io/token_shard.hpp"
#include "geotrain/model/stage_split.hpp"
#include "geotrain/plan/placement.hpp"
#include "geotrain/plan/tensor_parallel.hpp"
#include "geotrain/plan/workload.hpp"
#include "geotrain/runtime/checkpointing.hpp"
#include "geotrain/runtime/distributed_job.hpp"
#include "geotrain/runtime/evaluation.hpp"
#include "geotrain/runtime/job_layout.hpp"
#include "geotrain/runtime/mpi_check.hpp"
#include "geotrain/runtime/mpi_checkpoints.hpp"
#include "geotrain/runtime/mpi_probe.hpp"
#include "geotrain/runtime/encoded_links.hpp"
#include "geotrain/runtime/mpi_training.hpp"
#include "geotrain/runtime/progress_log.hpp"
#include "geotrain/runtime/timing_record.hpp"
#ifdef GEOTRAIN_HAVE_NCCL
#include "geotrain/runtime/nccl_training.hpp"
#endif

namespace geotrain::runtime {
namespace {

// The ranks per unit of the layout the config fixes (0, the search's
// choice, and 1 both mean one rank per pipeline device).
int fixed_tensor_parallel(const io::Config& config) { return config.tensor_parallel > 1 ? config.tensor_parallel : 1; }

// What the connected ranks do: train, or only evaluate (geotrain eval).
enum class JobKind { train, evaluate };

// What every rank prepares before talking to the others; failures here are
// bad input (exit 2) unless said otherwise.
struct Setup {
  io::Config config;  // as read; inputs.config once the inputs are read
  ModelShape model;
  RunInputs inputs;
  std::vector<model::StageSpec> stages;
  std::optional<plan::Network> matrix;  // network.matrix, when given
};

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

// Every training rank's events to the reporting rank (the job
// communicator's first), which writes the timing file; the others wait for
// its verdict, so the launcher does not stop it mid-write. Idle ranks have
// no events.
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

void prepare(Setup& s, const std::string& config_file, const std::vector<std::string>& overrides, int ranks) {
  const io::Config& config = s.config = io::read_config(config_file, overrides);
  const ModelShape& model = s.model = io::load_model(config).model;
  const int pp = config.plan_file.empty() ? config.pipeline_stages : 1;  // a plan file: its own stages, later
  if (!config.plan_file.empty() && config.tensor_parallel != 1) {
    throw InputError(config.origin_of("pipeline.tensor_parallel") + ": pipeline.tensor_parallel: " +
                     std::to_string(config.tensor_parallel) + " cannot be combined with pipeline.plan_file (the "
                     "plan file's tp fixes it)");
  }
  const int fixed_tp = fixed_tensor_parallel(config);  // the layout search's own choice, or a plan file's: later
  if (ranks % fixed_tp != 0) {
    throw InputError(config.origin_of("pipeline.tensor_parallel") + ": pipeline.tensor_parallel: " +
                     std::to_string(fixed_tp) + " does not divide the " + std::to_string(ranks) +
                     " ranks of this job (ranks = tensor_parallel x stages x data-parallel replicas)");
  }
  if (fixed_tp > 1 && (model.heads % fixed_tp != 0 || model.vocabulary < fixed_tp)) {
    throw InputError(config.origin_of("pipeline.tensor_parallel") + ": pipeline.tensor_parallel: " +
                     std::to_string(fixed_tp) + " does not divide the model's " + std::to_string(model.heads) +
                     " heads");
  }
  if ((ranks / fixed_tp) % pp != 0) {
    throw InputError(config.origin_of("pipeline.stages") + ": pipeline.stages: " + std::to_string(pp) +
                     " does not divide the " + std::to_string(ranks / fixed_tp) + " " +
                     (fixed_tp > 1 ? "tensor-parallel units" : "ranks") +
                     " of this job (ranks = " + (fixed_tp > 1 ? "tensor_parallel x " : "") +
                     "stages x data-parallel replicas; change the rank count or pipeline.stages)");
  }
  if (!config.compute_slowdown.empty() && static_cast<int>(config.compute_slowdown.size()) != ranks) {
    throw InputError(config.origin_of("emulation.compute_slowdown") + ": emulation.compute_slowdown: has " +
                     std::to_string(config.compute_slowdown.size()) + " entries but the job has " +
                     std::to_string(ranks) + " ranks (one factor per rank, or none)");
  }
  const char* split_key = config.layers_per_stage.empty() ? "pipeline.stages" : "pipeline.layers_per_stage";
  try {
    if (config.plan_file.empty()) s.stages = model::split_layers(model.layers, pp, config.layers_per_stage);
  } catch (const std::invalid_argument& e) {
    throw InputError(config.origin_of(split_key) + ": " + split_key + ": " + e.what());
  }
  if (!config.network_matrix.empty()) {
    // Only the network is used: the job sets the workload (a probed matrix
    // has no [workload]; a scenario's is ignored).
    io::WorkloadOverrides network_only;
    network_only.network_only = true;
    io::Scenario scenario = io::load_scenario(config.network_matrix, network_only);
    if (scenario.network.device_count != ranks) {
      throw InputError(config.network_matrix + ": devices: the matrix has " +
                       std::to_string(scenario.network.device_count) + " devices but the job has " +
                       std::to_string(ranks) + " ranks (network.matrix must describe exactly the job's ranks)");
    }
    s.matrix = std::move(scenario.network);
  }
}

// The model as the planner sees it: fp32 activations and gradients on the wire.
plan::TrainingShape shape_of(const ModelShape& m, const io::Config& c, int replicas) {
  const double tokens_per_step =
      static_cast<double>(c.micro_batch_sequences) * m.sequence_length * c.gradient_accumulation * replicas;
  plan::TrainingShape shape(m, tokens_per_step, 4, 4);
  shape.outer = io::outer_sync(c);  // local steps: the plan pays the data-parallel exchange once per H steps
  return shape;
}

std::string format_plan(const plan::Plan& p, const std::string& placement, const plan::Network& net) {
  std::ostringstream out;
  out << "plan (" << placement << "): " << (p.tensor_parallel > 1 ? std::to_string(p.tensor_parallel) + "-way tensor-parallel units x " : std::string())
      << p.pipeline_stages << " stages x " << p.data_parallel
      << " replicas; predicted communication per step " << std::setprecision(4) << p.cost.total_s() << " s (data-parallel "
      << p.cost.datap_s << " s, pipeline " << p.cost.pipeline_s << " s)\n";
  for (int r = 0; r < p.data_parallel; ++r) {
    out << "  pipeline " << r << ": ranks ";
    for (int s = 0; s < p.pipeline_stages; ++s) {
      const std::vector<int> unit = p.ranks_of_unit(p.stages[s][r]);
      out << (s ? " -> " : "") << (unit.size() > 1 ? "[" : "");
      for (std::size_t j = 0; j < unit.size(); ++j) out << (j ? " " : "") << unit[j];
      out << (unit.size() > 1 ? "]" : "");
      if (!net.site_of_device.empty() && unit.front() < net.device_count) {
        out << " (" << net.site_of_device[unit.front()] << ")";
      }
    }
    out << "\n";
  }
  std::vector<char> used(static_cast<std::size_t>(std::max(net.device_count, 0)), 0);
  for (const auto& stage : p.stages) {
    for (int unit : stage) {
      for (int d : p.ranks_of_unit(unit)) {
        if (d < net.device_count) used[static_cast<std::size_t>(d)] = 1;
      }
    }
  }
  std::string idle;  // the network is rank 0's (elsewhere it may be empty)
  for (int d = 0; d < net.device_count; ++d) {
    if (!used[static_cast<std::size_t>(d)]) idle.append(" ").append(std::to_string(d));
  }
  if (!idle.empty()) out << "  idle ranks:" << idle << "\n";
  return out.str();
}

// pipeline.layout = auto: the batch the fixed layout would train (micro-batch
// x accumulation x ranks / pipeline.stages) is the global batch to keep.
int global_batch_sequences(const io::Config& config, int ranks) {
  return config.micro_batch_sequences * config.gradient_accumulation *
         (ranks / fixed_tensor_parallel(config) / config.pipeline_stages);
}

// The searched layout replaces the fixed one's keys (so that logs,
// checkpoints and the timing file show what ran).
void adopt_layout(Setup& setup, const JobLayout& layout, int ranks) {
  io::Config& c = setup.inputs.config;
  // Validation keeps the sequences the fixed layout would have evaluated
  // (eval_batches batches of micro-batch x replicas), whatever the layout.
  const int evaluated = c.eval_batches * c.micro_batch_sequences *
                        (ranks / fixed_tensor_parallel(c) / c.pipeline_stages);
  const int per_batch = layout.micro_batch_sequences * layout.plan.data_parallel;
  c.eval_batches = std::max(1, (evaluated + per_batch - 1) / per_batch);
  c.micro_batch_sequences = layout.micro_batch_sequences;
  c.gradient_accumulation = layout.micro_batches;
  c.micro_batches_per_flush = layout.micro_batches_per_flush < layout.micro_batches ? layout.micro_batches_per_flush : 0;
  c.pipeline_stages = layout.plan.pipeline_stages;
  c.tensor_parallel = layout.plan.tensor_parallel;
  c.layers_per_stage = layout.layers_per_stage;
  setup.stages = model::split_layers(setup.inputs.model.layers, c.pipeline_stages, c.layers_per_stage);
}

// The network the planner sees: network.matrix, else probed (one rank: trivial).
plan::Network job_network(const Setup& setup, int ranks, bool talk, std::ostream& log) {
  const io::Config& config = setup.inputs.config;
  if (setup.matrix) {
    if (talk) log << "network: " << config.network_matrix << " (" << ranks << " ranks, not probed)\n";
    return *setup.matrix;
  }
  plan::Network network;
  if (ranks == 1) {
    network.device_count = 1;
    network.latency_s = {0.0};
    network.bandwidth_bytes_per_s = {1.0};
    return network;
  }
  ProbeOptions probe;
  probe.large_bytes = config.probe_bytes;
  probe.deadline_s = config.network_deadline_s;
  const double start = MPI_Wtime();
  network = probe_network(MPI_COMM_WORLD, probe);
  if (talk) {
    char line[128];
    std::snprintf(line, sizeof line, "network: probed %d ranks in %.2f s\n", ranks, MPI_Wtime() - start);
    log << line;
  }
  return network;
}

// Every rank's site, on every rank: rank 0's network names them (the
// scenario's [sites], or the probe's host names, which only rank 0 holds).
// Empty when it names none.
std::vector<std::string> sites_everywhere(const plan::Network& network_on_root, int ranks, double deadline_s) {
  std::string joined;
  if (static_cast<int>(network_on_root.site_of_device.size()) == ranks) {
    for (const std::string& site : network_on_root.site_of_device) joined += site + '\n';
  }
  const std::vector<std::uint8_t> bytes = broadcast_bytes(
      MPI_COMM_WORLD, std::vector<std::uint8_t>(joined.begin(), joined.end()), 0, deadline_s, "sharing the sites");
  std::vector<std::string> sites;
  std::string site;
  for (std::uint8_t c : bytes) {
    if (c != '\n') {
      site += static_cast<char>(c);
      continue;
    }
    sites.push_back(std::exchange(site, ""));
  }
  return sites;
}

// The plan, made on rank 0 and checked everywhere.
// With pipeline.tensor_parallel = t, the placement places units of t
// consecutive ranks of one host, linked as the layout search links units
// (plan::counterpart_network).
plan::Plan plan_job(const io::Config& config, const ModelShape& model, const plan::Network& network, int ranks,
                    bool talk, std::ostream& log) {
  const int tp = config.tensor_parallel, pp = config.pipeline_stages, dp = ranks / tp / pp;
  std::vector<std::vector<int>> groups;
  const std::string error = consecutive_tensor_groups(MPI_COMM_WORLD, tp, config.network_deadline_s, groups);
  if (!error.empty()) abort_all(config.origin_of("pipeline.tensor_parallel") + ": " + error);
  // Rank 0's network (elsewhere it may be empty) is the one planned on.
  const plan::Network units = tp > 1 && network.device_count == ranks ? plan::counterpart_network(network, groups) : network;
  plan::SearchOptions options;
  options.seed = config.seed;
  options.candidates = config.plan_candidates;
  const plan::Workload workload = plan::workload_from_model(shape_of(model, config, dp), pp, dp);
  plan::Plan the_plan = plan_on_root_and_broadcast(MPI_COMM_WORLD, units, workload, config.placement, options,
                                                   config.network_deadline_s);
  if (tp > 1) {
    the_plan.tensor_parallel = tp;
    the_plan.tensor_groups = groups;
  }
  if (talk) log << format_plan(the_plan, plan::to_string(config.placement), network) << std::flush;
  return the_plan;
}

WireCodec wire_codec(const io::Config& config, WireFormat format) {
  return {format, config.compression_group_size, config.compression_topk_fraction};
}

WireCodec gradient_codec(const io::Config& config) { return wire_codec(config, config.gradient_wire); }

// Lossy formats are encoded on the host, and the outer step of local steps
// runs there: MPI carries them.
[[maybe_unused]] bool exchanges_on_host(const io::Config& config) {  // used where NCCL is built
  return config.outer_local_steps > 0 || config.gradient_wire != WireFormat::fp32 || config.activation_wire != WireFormat::fp32 ||
         config.activation_gradient_wire != WireFormat::fp32 || config.tied_embedding_wire != WireFormat::fp32;
}

// The rank's backend, pipeline links and collectives: NCCL on GPUs where
// built (unless network.transport = mpi), else MPI.
// How the job writes checkpoints (checkpoint.form resolved on what the ranks
// share), agreed by every training rank.
struct CheckpointSetup {
  CheckpointForm form = CheckpointForm::single;
  CheckpointFolderView view;
  std::vector<std::string> site_of_position;  // each training rank's site ("": not given)
};

// Collective over the training ranks; "" or the InputError's text.
std::string setup_checkpoints(const io::Config& config, const Topology& topology, const plan::Network& network,
                              double deadline_s, CheckpointSetup& setup) {
  for (int rank : topology.job_ranks) {
    const bool named = static_cast<std::size_t>(rank) < network.site_of_device.size();
    setup.site_of_position.push_back(named ? network.site_of_device[static_cast<std::size_t>(rank)] : "");
  }
  setup.view = probe_checkpoint_folder(config.checkpoint_dir, topology.job_comm.get(), setup.site_of_position,
                                       deadline_s);
  setup.view.premises.parallel_io = io::parallel_hdf5_built() && threads_multiple();
  try {
    setup.form = resolve_checkpoint_form(config.checkpoint_form, setup.view.premises);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

const char* describe_form(CheckpointForm form) {
  switch (form) {
    case CheckpointForm::parallel: return "parallel (one file, every rank writes its part through parallel HDF5)";
    case CheckpointForm::per_site: return "per_site (one shard per site, written by its ranks through parallel HDF5)";
    case CheckpointForm::sharded: return "sharded (one shard per writing rank)";
    default: return "single (gathered to one writing rank)";
  }
}

class JobConnections {
 public:
  JobConnections(const io::Config& config, const Topology& topology, std::unique_ptr<kernels::Backend> backend,
                 const CheckpointSetup* checkpoints, bool talk, std::ostream& log)
      : backend_(std::move(backend)), mpi_collectives_(topology, config.network_deadline_s, gradient_codec(config),
                                                      wire_codec(config, config.tied_embedding_wire)) {
    const double deadline_s = config.network_deadline_s;
    const bool on_gpu = backend_->kind() == kernels::DeviceKind::cuda;
#ifdef GEOTRAIN_HAVE_NCCL
    if (on_gpu && config.transport != Transport::mpi && !exchanges_on_host(config)) {
      links_ = make_nccl_links(topology, *backend_, deadline_s);
      nccl_collectives_ = make_nccl_collectives(topology, *backend_, mpi_collectives_, deadline_s);
    }
#endif
    if (config.transport == Transport::nccl && !links_) {
      abort_all(std::string("network.transport = nccl: ") +
                (on_gpu ? "this geotrain was built without NCCL" : "this rank trains on the CPU") +
                " (use network.transport = mpi)");
    }
    if (!links_) links_ = std::make_unique<MpiPipelineLinks>(topology, deadline_s);
    if (!nccl_collectives_ && (config.activation_wire != WireFormat::fp32 ||
                               config.activation_gradient_wire != WireFormat::fp32)) {
      links_ = std::make_unique<EncodedPipelineLinks>(std::move(links_), wire_codec(config, config.activation_wire),
                                                      wire_codec(config, config.activation_gradient_wire));
    }
    if (talk) log << "transport: " << (nccl_collectives_ ? "NCCL" : "MPI") << "\n";
    if (config.outer_sync_within_site) {
      if (topology.site_ranks.empty()) {
        abort_all("outer.sync_within_site: the network names no sites (give network.matrix a scenario with [sites], "
                  "or probe: sites are host names)");
      }
      within_site_.emplace(topology, deadline_s, MpiCollectives::WithinSite{});
      if (talk) {
        log << "local steps: replicas sum every step within their site (stage " << topology.stage << ": "
            << topology.site_ranks.size() << " of " << topology.dp_ranks.size() << " replicas here)\n";
      }
    }
    if (checkpoints != nullptr) {
      sink_ = make_mpi_checkpoint_sink(config.checkpoint_dir, config.checkpoint_keep, checkpoints->form,
                                       {deadline_s, config.checkpoint_deadline_s}, topology.job_comm.get(),
                                       topology.job_ranks, checkpoints->view, checkpoints->site_of_position);
    }
    if (topology.tensor_parallel > 1) {
#ifdef GEOTRAIN_HAVE_NCCL
      if (nccl_collectives_) tensor_group_ = make_nccl_tensor_group(topology, *backend_, deadline_s);
#endif
      if (!tensor_group_) tensor_group_ = std::make_unique<MpiTensorGroup>(topology, *backend_, deadline_s);
      if (talk) log << "tensor parallelism: " << topology.tensor_parallel << " ranks per unit, sums over "
                    << (nccl_collectives_ ? "NCCL" : "MPI") << "\n";
    }
  }

  RankConnections get() {
    Collectives& collectives = nccl_collectives_ ? *nccl_collectives_ : static_cast<Collectives&>(mpi_collectives_);
    return {*backend_, *links_, collectives, sink_.get(), within_site_ ? &*within_site_ : nullptr,
            tensor_group_.get()};
  }

 private:
  std::unique_ptr<kernels::Backend> backend_;
  MpiCollectives mpi_collectives_;
  std::unique_ptr<PipelineLinks> links_;
  std::unique_ptr<Collectives> nccl_collectives_;
  std::unique_ptr<CheckpointSink> sink_;
  std::optional<MpiCollectives> within_site_;  // outer.sync_within_site
  std::unique_ptr<model::TensorGroup> tensor_group_;  // pipeline.tensor_parallel > 1
};

// Rank 0's closing lines: the summary and where a step's time went.
void report_job_end(const TrainResult& result, const io::Config& config, int ranks, int pp, std::ostream& log) {
  if (result.stopped_by_signal) {
    std::cerr << stopped_summary(result);
  } else {
    log << final_summary(result);
  }
  if (config.quiet) return;
  const StepBreakdown& b = result.breakdown;
  // The pipeline share of the pipeline phase: the bubble plus transfers.
  const int m = config.gradient_accumulation;
  const double measured = b.pipeline_s / (b.compute_s + b.pipeline_s);
  const double ideal = static_cast<double>(pp - 1) / (m + pp - 1);
  char line[320];
  std::snprintf(line, sizeof line,
                "time per step (mean over %d ranks): %.1f ms = compute %.1f + pipeline %.1f + gradient sync %.1f "
                "+ optimizer %.1f ms\n"
                "pipeline idle %.1f%% of the pipeline phase (bubble (p-1)/(m+p-1) = %.1f%% for p=%d, m=%d)\n",
                ranks, 1e3 * b.step_s, 1e3 * b.compute_s, 1e3 * b.pipeline_s, 1e3 * b.data_parallel_s,
                1e3 * b.optimizer_s, 100 * measured, 100 * ideal, pp, m);
  log << line;
}

// geotrain eval's end: every rank's share, rank 0 prints.
int evaluate_job(RunInputs& inputs, const RankRole& role, const RankConnections& with, std::ostream& log) {
  Evaluation evaluation;
  try {
    evaluation = evaluate(inputs, role, with);
  } catch (const std::exception& e) {
    abort_all(e.what());
  }
  if (role.reports) log << evaluation_report(evaluation, inputs) << std::flush;
  return 0;
}

int run_job(const std::string& config_file, const std::vector<std::string>& overrides, std::ostream& log,
            JobKind kind) {
  MpiSession mpi(nullptr, nullptr);
  const int rank = mpi.rank(), ranks = mpi.size();
  const bool root = rank == 0;

  Setup setup;
  std::string error;
  int code = 0;
  auto attempt = [&](const auto& step) {
    try {
      step();
    } catch (const InputError& e) {
      error = e.what(), code = kExitInputError;
    } catch (const std::exception& e) {
      error = e.what(), code = kExitRunError;
    }
  };
  attempt([&] { prepare(setup, config_file, overrides, ranks); });
  // Inputs are not read yet when the config itself failed: fall back to a
  // short deadline that still outlasts slow file systems.
  const double deadline_s = code == 0 ? setup.config.network_deadline_s : 120.0;
  if (const int failed = agree_on_failure(error, code, deadline_s)) return failed;
  // Sites that share no folder: each completes its copy of the checkpoint to resume or evaluate.
  if (const int failed = fetch_missing_shards(setup.config.checkpoint_dir, setup.config.checkpoint_resume, deadline_s)) {
    return failed;
  }
  attempt([&] {
    setup.inputs = kind == JobKind::train ? prepare_run(setup.config, setup.model)
                                          : prepare_evaluation(setup.config, setup.model);
  });
  if (const int failed = agree_on_failure(error, code, deadline_s)) return failed;
  const io::Config& config = setup.inputs.config;
  const bool talk = root && !config.quiet && kind == JobKind::train;
  std::ostream& text = text_stream(config, log);

  plan::Network network = job_network(setup, ranks, talk, text);  // 1. measured, or given
  network.site_of_device = sites_everywhere(network, ranks, deadline_s);
  std::unique_ptr<kernels::Backend> backend;
  try {
    backend = kernels::make_backend(config.device);
  } catch (const std::exception& e) {
    abort_all(e.what());
  }
  plan::Plan the_plan;  // 2. on rank 0
  std::string idle_note;
  if (config.layout == LayoutChoice::automatic || !config.plan_file.empty()) {
    const JobLayout layout = config.plan_file.empty()
                                 ? search_job_layout(config, setup.inputs.model, network, *backend,
                                                     global_batch_sequences(config, ranks), deadline_s)
                                 : plan_file_layout(config, setup.inputs.model, deadline_s);
    if (!layout.error.empty()) {
      if (root) std::cerr << "geotrain: error: " << layout.error << "\n";
      return kExitInputError;
    }
    adopt_layout(setup, layout, ranks);
    the_plan = layout.plan;
    idle_note = idle_reason(layout, rank);
    if (talk) text << describe(layout) << format_plan(the_plan, layout.source == "auto" ? "auto layout" : "plan file", network) << std::flush;
  } else {
    the_plan = plan_job(config, setup.inputs.model, network, ranks, talk, text);
  }
  const Topology topology = make_topology(MPI_COMM_WORLD, the_plan, deadline_s,  // 3. communicators
                                          config.outer_sync_within_site ? network.site_of_device : std::vector<std::string>{});
  if (topology.idle) {
    // One write: the ranks' lines must not interleave (std::cerr writes each piece at once).
    std::cerr << "geotrain: rank " + std::to_string(rank) + " (host " + host_name() + "): " + idle_note + "\n";
    return 0;
  }
  const bool reports = rank == topology.job_ranks.front();
  std::optional<CheckpointSetup> checkpoints;
  if (kind == JobKind::train && !config.checkpoint_dir.empty()) {
    checkpoints.emplace();
    const std::string checkpoint_error = setup_checkpoints(config, topology, network, deadline_s, *checkpoints);
    if (const int failed = agree_on_failure(checkpoint_error, kExitInputError, deadline_s,
                                            "agreeing on checkpoint.form", topology.job_comm.get())) {
      return failed;
    }
    if (reports && !config.quiet) text << "checkpoints: " << describe_form(checkpoints->form) << "\n";
  }
  JobConnections connections(config, topology, std::move(backend), checkpoints ? &*checkpoints : nullptr,
                             reports && !config.quiet && kind == JobKind::train, text);
  RankRole role;
  role.stage = topology.stage, role.stages = the_plan.pipeline_stages;
  role.replica = topology.replica, role.replicas = the_plan.data_parallel;
  role.rank = rank;
  role.reports = reports;
  role.spec = setup.stages[topology.stage];
  role.spec.tensor_parallel = topology.tensor_parallel;
  role.spec.tensor_rank = topology.tensor_rank;
  role.job_ranks = static_cast<int>(topology.job_ranks.size());
  role.job_index = static_cast<int>(std::find(topology.job_ranks.begin(), topology.job_ranks.end(), rank) -
                                    topology.job_ranks.begin());
  role.plan_text = format_plan(the_plan, plan::to_string(config.placement), network);
  role.site_replicas = std::max<int>(1, static_cast<int>(topology.site_ranks.size()));
  if (kind == JobKind::evaluate) return evaluate_job(setup.inputs, role, connections.get(), log);
  const bool talks = reports && !config.quiet;
  const std::string timing_path = reports ? io::expand_run_name(config.timing_file) : "";
  TrainResult result;
  try {
    result = train(setup.inputs, role, connections.get(), log);  // 4. training
  } catch (const ReportedFailure& e) {
    return e.code();  // one rank has printed it; every rank leaves the same way
  } catch (const std::exception& e) {
    abort_all(e.what());
  }
  if (!config.timing_file.empty()) {
    JobDescription job;
    job.device = result.device;
    job.network = network;
    job.network_source = setup.matrix ? config.network_matrix : (ranks > 1 ? "probed" : "single rank");
    job.plan = the_plan;
    job.plan_text = role.plan_text;
    if (!write_job_timing(timing_path, config, setup.inputs.model, job, result, topology, ranks, deadline_s)) {
      return kExitRunError;
    }
    if (talks) text << "timing: " << timing_path << "\n";
  }
  if (reports) report_job_end(result, config, static_cast<int>(topology.job_ranks.size()), the_plan.pipeline_stages, text);
  return result.stopped_by_signal ? kExitRunError : 0;
}

}  // namespace

int run_distributed_training(const std::string& config_file, const std::vector<std::string>& overrides,
                             std::ostream& log) {
  return run_job(config_file, overrides, log, JobKind::train);
}

int run_distributed_evaluation(const std::string& config_file, const std::vector<std::string>& overrides,
                               std::ostream& log) {
  return run_job(config_file, overrides, log, JobKind::evaluate);
}

}  // namespace geotrain::runtime

namespace geotrain::runtime {

bool launched_by_mpi() {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"}) {
    if (std::getenv(variable) != nullptr) return true;
  }
  return false;
}

}  // namespace geotrain::runtime
