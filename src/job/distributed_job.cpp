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
#include "geotrain/io/config_plan.hpp"
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
#include "geotrain/job/distributed_job.hpp"
#include "geotrain/runtime/evaluation.hpp"
#include "geotrain/job/job_layout.hpp"
#include "geotrain/job/job_timing.hpp"
#include "geotrain/mpi/mpi_check.hpp"
#include "geotrain/job/mpi_checkpoints.hpp"
#include "geotrain/mpi/mpi_probe.hpp"
#include "geotrain/runtime/encoded_links.hpp"
#include "geotrain/job/mpi_training.hpp"
#include "geotrain/runtime/progress_log.hpp"
#include "geotrain/runtime/timing_record.hpp"
#ifdef GEOTRAIN_HAVE_NCCL
#include "geotrain/job/nccl_training.hpp"
#endif

namespace geotrain::runtime {
namespace {

// What the connected ranks do: train, or only evaluate (geotrain eval).
enum class JobKind { train, evaluate };

// What every rank prepares before talking to the others; failures here are
// bad input (exit 2) unless said otherwise.
struct Setup {
  io::Config config;  // as read, until read_inputs moves it into inputs.config (the one copy from then on)
  ModelShape model;
  RunInputs inputs;
  std::vector<model::StageSpec> stages;
  std::optional<plan::Network> matrix;  // network.matrix, when given
};

void prepare(Setup& s, const std::string& config_file, const std::vector<std::string>& overrides, int ranks,
             JobKind kind) {
  if (kind == JobKind::evaluate) {  // the model of the checkpoint it scores
    EvaluationSettings settings = read_evaluation_settings(config_file, overrides);
    s.config = std::move(settings.config), s.model = settings.model;
  } else {
    s.config = io::read_config(config_file, overrides);
    s.model = io::load_model(s.config).model;
  }
  const io::Config& config = s.config;
  const ModelShape& model = s.model;
  io::check_rank_count(config, model, ranks);
  const int pp = config.pipeline.plan_file.empty() ? config.pipeline.stages : 1;  // a plan file: its own stages, later
  const char* split_key = config.pipeline.layers_per_stage.empty() ? "pipeline.stages" : "pipeline.layers_per_stage";
  try {
    if (config.pipeline.plan_file.empty()) s.stages = model::split_layers(model.layers, pp, config.pipeline.layers_per_stage);
  } catch (const std::exception& e) {
    throw config.error(split_key, e.what());
  }
  if (!config.network.matrix.empty()) {
    // Only the network is used: the job sets the workload (a probed matrix
    // has no [workload]; a scenario's is ignored).
    io::WorkloadOverrides network_only;
    network_only.network_only = true;
    io::Scenario scenario = io::load_scenario(config.network.matrix, network_only);
    if (scenario.network.device_count != ranks) {
      throw InputError(config.network.matrix + ": devices: the matrix has " +
                       std::to_string(scenario.network.device_count) + " devices but the job has " +
                       std::to_string(ranks) + " ranks (network.matrix must describe exactly the job's ranks)");
    }
    s.matrix = std::move(scenario.network);
  }
}


// The searched layout (or a plan file's) becomes what runs: the inputs'
// layout, which checkpoints and the timing file record beside the config
// as written.
void adopt_layout(Setup& setup, const JobLayout& layout, int ranks) {
  const io::Config& c = setup.inputs.config;
  StepLayout& run = setup.inputs.layout;
  // Validation keeps the sequences the fixed layout would have evaluated
  // (eval_batches batches of micro-batch x replicas), whatever the layout.
  const int evaluated = c.train.eval_batches * c.train.micro_batch_sequences *
                        (ranks / io::fixed_tensor_parallel(c) / c.pipeline.stages);
  const int per_batch = layout.micro_batch_sequences * layout.plan.data_parallel;
  run.source = layout.source;
  run.eval_batches = std::max(1, (evaluated + per_batch - 1) / per_batch);
  run.micro_batch_sequences = layout.micro_batch_sequences;
  run.micro_batches = layout.micro_batches;
  run.micro_batches_per_flush = layout.micro_batches_per_flush < layout.micro_batches ? layout.micro_batches_per_flush : 0;
  run.stages = layout.plan.pipeline_stages;
  run.tensor_parallel = layout.plan.tensor_parallel;
  run.layers_per_stage = layout.layers_per_stage;
  setup.stages = model::split_layers(setup.inputs.model.layers, run.stages, run.layers_per_stage);
}

// The network the planner sees: network.matrix, else probed (one rank: trivial).
plan::Network job_network(const Setup& setup, int ranks, bool talk, std::ostream& log) {
  const io::Config& config = setup.inputs.config;
  if (setup.matrix) {
    if (talk) log << "network: " << config.network.matrix << " (" << ranks << " ranks, not probed)\n";
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
  probe.large_bytes = config.network.probe_bytes;
  probe.deadline_s = config.network.deadline_s;
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
  const int tp = config.pipeline.tensor_parallel, pp = config.pipeline.stages, dp = ranks / tp / pp;
  std::vector<std::vector<int>> groups;
  const std::string error = consecutive_tensor_groups(MPI_COMM_WORLD, tp, config.network.deadline_s, groups);
  if (!error.empty()) abort_all(config.origin_of("pipeline.tensor_parallel") + ": " + error);
  // Rank 0's network (elsewhere it may be empty) is the one planned on.
  const plan::Network units = tp > 1 && network.device_count == ranks ? plan::counterpart_network(network, groups) : network;
  const plan::SearchOptions options = io::placement_search_options(config);
  const plan::Workload workload =
      plan::workload_from_model(io::training_shape(config, model, io::global_batch_sequences(config, ranks)), pp, dp);
  plan::Plan the_plan = plan_on_root_and_broadcast(MPI_COMM_WORLD, units, workload, config.pipeline.placement, options,
                                                   config.network.deadline_s);
  if (tp > 1) {
    the_plan.tensor_parallel = tp;
    the_plan.tensor_groups = groups;
  }
  if (talk) log << plan::describe_placement(the_plan, plan::to_string(config.pipeline.placement), network) << std::flush;
  return the_plan;
}

WireCodec wire_codec(const io::Config& config, WireFormat format) {
  return WireCodec::of(config.compression.encoding(format));
}

WireCodec gradient_codec(const io::Config& config) { return wire_codec(config, config.compression.gradients); }

// Lossy formats are encoded on the host, and the outer step of local steps
// runs there: MPI carries them.
[[maybe_unused]] bool exchanges_on_host(const io::Config& config) {  // used where NCCL is built
  return config.outer.local_steps > 0 || config.compression.gradients != WireFormat::fp32 || config.compression.activations != WireFormat::fp32 ||
         config.compression.activation_gradients != WireFormat::fp32 || config.compression.tied_embedding != WireFormat::fp32;
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
  setup.view = probe_checkpoint_folder(config.checkpoint.dir, topology.job_comm.get(), setup.site_of_position,
                                       deadline_s);
  setup.view.premises.parallel_io = io::parallel_hdf5_built() && threads_multiple();
  try {
    setup.form = resolve_checkpoint_form(config.checkpoint.form, setup.view.premises);
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
                 const CheckpointSetup* checkpoints, bool hierarchical, bool talk, std::ostream& log)
      : backend_(std::move(backend)), mpi_collectives_(topology, config.network.deadline_s, gradient_codec(config),
                                                      wire_codec(config, config.compression.tied_embedding),
                                                      hierarchical) {
    const double deadline_s = config.network.deadline_s;
    const bool on_gpu = backend_->kind() == kernels::DeviceKind::cuda;
#ifdef GEOTRAIN_HAVE_NCCL
    if (on_gpu && config.network.transport != Transport::mpi && !exchanges_on_host(config)) {
      links_ = make_nccl_links(topology, *backend_, deadline_s);
      nccl_collectives_ = make_nccl_collectives(topology, *backend_, mpi_collectives_, deadline_s);
    }
#endif
    if (config.network.transport == Transport::nccl && !links_) {
      abort_all(std::string("network.transport = nccl: ") +
                (on_gpu ? "this geotrain was built without NCCL" : "this rank trains on the CPU") +
                " (use network.transport = mpi)");
    }
    if (!links_) links_ = std::make_unique<MpiPipelineLinks>(topology, deadline_s);
    if (!nccl_collectives_ && (config.compression.activations != WireFormat::fp32 ||
                               config.compression.activation_gradients != WireFormat::fp32)) {
      links_ = std::make_unique<EncodedPipelineLinks>(std::move(links_), wire_codec(config, config.compression.activations),
                                                      wire_codec(config, config.compression.activation_gradients));
    }
    if (talk) log << "transport: " << (nccl_collectives_ ? "NCCL" : "MPI") << "\n";
    if (config.outer.sync_within_site) {
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
      sink_ = make_mpi_checkpoint_sink(config.checkpoint.dir, config.checkpoint.keep, checkpoints->form,
                                       {deadline_s, config.checkpoint.deadline_s}, topology.job_comm.get(),
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
void report_job_end(const TrainResult& result, const RunInputs& inputs, int ranks, int pp, std::ostream& log) {
  const io::Config& config = inputs.config;
  if (result.stopped_by_signal) {
    std::cerr << stopped_summary(result);
  } else {
    log << final_summary(result);
  }
  if (config.train.quiet) return;
  const StepBreakdown& b = result.breakdown;
  // The pipeline share of the pipeline phase: the bubble plus transfers.
  const int m = inputs.layout.micro_batches;
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

// The job's state as its phases fill it in, in this order: inputs, network,
// layout, topology, connections, training, report.
struct Job {
  Job(int rank_in_world, int world_size) : rank(rank_in_world), ranks(world_size) {}
  const int rank, ranks;
  Setup setup;
  double deadline_s = 120.0;
  plan::Network network;
  std::unique_ptr<kernels::Backend> backend;
  plan::Plan plan;
  std::string idle_note;  // why this rank is left out, if the layout leaves it out
  std::vector<plan::DataParallelScheme> dp_exchange;  // per stage: direct or hierarchical

  const io::Config& config() const { return setup.inputs.config; }
};

// 1. Inputs: every rank reads and checks the config, the model, the data and
// the checkpoint; all of them stop together (exit 2) when one cannot.
int read_inputs(Job& job, const std::string& config_file, const std::vector<std::string>& overrides, JobKind kind) {
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
  Setup& setup = job.setup;
  attempt([&] { prepare(setup, config_file, overrides, job.ranks, kind); });
  // Inputs are not read yet when the config itself failed: fall back to a
  // short deadline that still outlasts slow file systems.
  if (code == 0) job.deadline_s = setup.config.network.deadline_s;
  if (const int failed = agree_on_failure(error, code, job.deadline_s)) return failed;
  // Sites that share no folder: each completes its copy of the checkpoint to resume or evaluate.
  if (const int failed = fetch_missing_shards(setup.config.checkpoint.dir, setup.config.checkpoint.resume, job.deadline_s)) {
    return failed;
  }
  attempt([&] {
    setup.inputs = kind == JobKind::train ? prepare_run(std::move(setup.config), setup.model)
                                          : prepare_evaluation(std::move(setup.config), setup.model);
  });
  return agree_on_failure(error, code, job.deadline_s);
}

// 2. Network: measured, or given; with every rank's site.
void measure_network(Job& job, bool talk, std::ostream& text) {
  job.network = job_network(job.setup, job.ranks, talk, text);
  job.network.site_of_device = sites_everywhere(job.network, job.ranks, job.deadline_s);
  try {
    job.backend = kernels::make_backend(job.config().device.kind);
  } catch (const std::exception& e) {
    abort_all(e.what());
  }
}

// 3. Layout: the fixed one placed on rank 0, or the layout search's, or a
// plan file's (the config then takes the layout's keys: adopt_layout).
int choose_layout(Job& job, bool talk, std::ostream& text) {
  const io::Config& config = job.config();
  if (config.pipeline.layout != LayoutChoice::automatic && config.pipeline.plan_file.empty()) {
    job.plan = plan_job(config, job.setup.inputs.model, job.network, job.ranks, talk, text);
    return 0;
  }
  const JobLayout layout = config.pipeline.plan_file.empty()
                               ? search_job_layout(config, job.setup.inputs.model, job.network, *job.backend,
                                                   io::global_batch_sequences(config, job.ranks), job.deadline_s)
                               : plan_file_layout(config, job.setup.inputs.model, job.deadline_s);
  if (!layout.error.empty()) {
    if (job.rank == 0) std::cerr << "geotrain: error: " << layout.error << "\n";
    return kExitInputError;
  }
  adopt_layout(job.setup, layout, job.ranks);
  job.plan = layout.plan;
  job.idle_note = idle_reason(layout, job.rank);
  if (talk) {
    text << describe(layout)
         << plan::describe_placement(job.plan, layout.source == "auto" ? "auto layout" : "plan file", job.network)
         << std::flush;
  }
  return 0;
}

// 3b. The data-parallel exchange of each stage's group (network.dp_exchange):
// auto is decided on rank 0, which holds the whole network, and broadcast.
int choose_dp_exchange(Job& job, bool talk, std::ostream& text) {
  const io::Config& config = job.config();
  const auto pp = static_cast<std::size_t>(job.plan.pipeline_stages);
  job.dp_exchange.assign(pp, plan::DataParallelScheme::direct);
  const bool sites = !job.network.site_of_device.empty();
  if (config.network.dp_exchange == DataParallelExchange::hierarchical && !sites) {
    if (job.rank == 0) {
      std::cerr << "geotrain: error: " << config.origin_of("network.dp_exchange")
                << ": network.dp_exchange: hierarchical needs sites (give network.matrix a scenario with [sites], or "
                   "probe: sites are host names)\n";
    }
    return kExitInputError;
  }
  if (config.network.dp_exchange == DataParallelExchange::hierarchical) {
    job.dp_exchange.assign(pp, plan::DataParallelScheme::hierarchical);
  } else if (config.network.dp_exchange == DataParallelExchange::automatic && sites && job.plan.data_parallel > 1) {
    std::vector<std::uint8_t> mine;
    if (job.rank == 0) {
      for (plan::DataParallelScheme scheme : faster_exchanges(job.network, job.plan, job.setup.inputs.model, job.setup.stages)) {
        mine.push_back(scheme == plan::DataParallelScheme::hierarchical);
      }
    }
    const std::vector<std::uint8_t> hierarchical =
        broadcast_bytes(MPI_COMM_WORLD, mine, 0, job.deadline_s, "sharing network.dp_exchange");
    for (std::size_t s = 0; s < pp && s < hierarchical.size(); ++s) {
      if (hierarchical[s]) job.dp_exchange[s] = plan::DataParallelScheme::hierarchical;
    }
  }
  if (talk && job.plan.data_parallel > 1) {
    text << "data-parallel sums (network.dp_exchange = " << to_string(config.network.dp_exchange)
         << "): " << plan::to_string(job.dp_exchange) << " (by stage)\n";
  }
  return 0;
}

// 5. Checkpoints: the form the training ranks agree on (collective).
int agree_on_checkpoints(const Job& job, const Topology& topology, bool reports, std::ostream& text,
                         std::optional<CheckpointSetup>& checkpoints) {
  const io::Config& config = job.config();
  if (config.checkpoint.dir.empty()) return 0;
  checkpoints.emplace();
  const std::string error = setup_checkpoints(config, topology, job.network, job.deadline_s, *checkpoints);
  if (const int failed = agree_on_failure(error, kExitInputError, job.deadline_s, "agreeing on checkpoint.form",
                                          topology.job_comm.get())) {
    return failed;
  }
  if (reports && !config.train.quiet) text << "checkpoints: " << describe_form(checkpoints->form) << "\n";
  return 0;
}

RankRole rank_role(const Job& job, const Topology& topology, bool reports) {
  RankRole role;
  role.stage = topology.stage, role.stages = job.plan.pipeline_stages;
  role.replica = topology.replica, role.replicas = job.plan.data_parallel;
  role.rank = job.rank;
  role.reports = reports;
  role.spec = job.setup.stages[topology.stage];
  role.spec.tensor_parallel = topology.tensor_parallel;
  role.spec.tensor_rank = topology.tensor_rank;
  role.job_ranks = static_cast<int>(topology.job_ranks.size());
  role.job_index = static_cast<int>(std::find(topology.job_ranks.begin(), topology.job_ranks.end(), job.rank) -
                                    topology.job_ranks.begin());
  role.plan_text = plan::describe_placement(job.plan, plan::to_string(job.config().pipeline.placement), job.network);
  role.site_replicas = std::max<int>(1, static_cast<int>(topology.site_ranks.size()));
  return role;
}

// 6. Training, then 7. the timing file and the closing report.
int train_and_report(Job& job, const RankRole& role, const RankConnections& with, const Topology& topology,
                     std::ostream& log, std::ostream& text) {
  const io::Config& config = job.config();
  const std::string timing_path = role.reports ? io::expand_run_name(config.timing.file) : "";
  TrainResult result;
  try {
    result = train(job.setup.inputs, role, with, log);
  } catch (const ReportedFailure& e) {
    return e.code();  // one rank has printed it; every rank leaves the same way
  } catch (const std::exception& e) {
    abort_all(e.what());
  }
  if (!config.timing.file.empty()) {
    JobDescription described;
    described.layout = job.setup.inputs.layout;
    described.device = result.device;
    described.network = job.network;
    described.network_source = job.setup.matrix ? config.network.matrix : (job.ranks > 1 ? "probed" : "single rank");
    described.plan = job.plan;
    described.dp_schemes = job.dp_exchange;
    described.plan_text = role.plan_text;
    if (!write_job_timing(timing_path, config, job.setup.inputs.model, described, result, topology, job.ranks,
                          job.deadline_s)) {
      return kExitRunError;
    }
    if (role.reports && !config.train.quiet) text << "timing: " << timing_path << "\n";
  }
  if (role.reports) {
    report_job_end(result, job.setup.inputs, static_cast<int>(topology.job_ranks.size()), job.plan.pipeline_stages, text);
  }
  return result.stopped_by_signal ? kExitRunError : 0;
}

int run_job(const std::string& config_file, const std::vector<std::string>& overrides, std::ostream& log,
            JobKind kind) {
  MpiSession mpi(nullptr, nullptr);
  Job job(mpi.rank(), mpi.size());
  if (const int failed = read_inputs(job, config_file, overrides, kind)) return failed;
  const io::Config& config = job.config();
  const bool talk = job.rank == 0 && !config.train.quiet && kind == JobKind::train;
  std::ostream& text = text_stream(config, log);
  measure_network(job, talk, text);
  if (const int failed = choose_layout(job, talk, text)) return failed;
  if (const int failed = choose_dp_exchange(job, talk, text)) return failed;
  const Topology topology = make_topology(MPI_COMM_WORLD, job.plan, job.deadline_s,  // 4. communicators
                                          job.network.site_of_device);
  if (topology.idle) {
    // One write: the ranks' lines must not interleave (std::cerr writes each piece at once).
    std::cerr << "geotrain: rank " + std::to_string(job.rank) + " (host " + host_name() + "): " + job.idle_note + "\n";
    return 0;
  }
  const bool reports = job.rank == topology.job_ranks.front();
  std::optional<CheckpointSetup> checkpoints;
  if (kind == JobKind::train) {
    if (const int failed = agree_on_checkpoints(job, topology, reports, text, checkpoints)) return failed;
  }
  JobConnections connections(config, topology, std::move(job.backend), checkpoints ? &*checkpoints : nullptr,
                             job.dp_exchange[static_cast<std::size_t>(topology.stage)] == plan::DataParallelScheme::hierarchical,
                             reports && !config.train.quiet && kind == JobKind::train, text);
  const RankRole role = rank_role(job, topology, reports);
  if (kind == JobKind::evaluate) return evaluate_job(job.setup.inputs, role, connections.get(), log);
  return train_and_report(job, role, connections.get(), topology, log, text);
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
