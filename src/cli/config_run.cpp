// `geotrain plan CONFIG.toml` and `geotrain simulate CONFIG.toml`: the layout
// and the step that `geotrain train CONFIG.toml` would run, priced with the
// same mapping from the config to the planner's and simulator's inputs
// (io/config_plan.hpp) that the training job uses.
#include "config_run.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "geotrain/common/errors.hpp"
#include "geotrain/io/config_plan.hpp"
#include "geotrain/io/scenario.hpp"
#include "geotrain/plan/layout_search.hpp"
#include "geotrain/plan/tensor_parallel.hpp"
#include "text_format.hpp"

namespace geotrain::cli {
namespace {

// A job on one host, as a local mpirun probes it: every pair alike. Only the
// layout and the compute matter there; the placement is one of many equal ones.
constexpr double kOneHostLatencyS = 1e-5;
constexpr double kOneHostBandwidthBytesPerS = 1e10;

struct ConfigNetwork {
  plan::Network network;
  std::string source;  // for the report
};

ConfigNetwork equal_links(int ranks) {
  ConfigNetwork n;
  n.network.device_count = ranks;
  n.network.latency_s.assign(static_cast<std::size_t>(ranks) * ranks, kOneHostLatencyS);
  n.network.bandwidth_bytes_per_s.assign(static_cast<std::size_t>(ranks) * ranks, kOneHostBandwidthBytesPerS);
  for (int d = 0; d < ranks; ++d) {
    n.network.latency_s[static_cast<std::size_t>(d) * ranks + d] = 0;
    n.network.node_of_device.push_back("one-host");
  }
  plan::assume_nics_where_unstated(n.network);
  n.source = std::to_string(ranks) + " ranks of one host with equal links (" + format_number("%g", kOneHostLatencyS * 1e6) +
             " us, " + format_number("%g", kOneHostBandwidthBytesPerS / 1e9) +
             " GB/s; assumed: network.matrix is unset, so the job would probe it)";
  return n;
}

// --scenario, else network.matrix, else --ranks ranks with equal links.
ConfigNetwork config_network(const ConfigRunOptions& run, const std::string& scenario, const io::Config& config) {
  io::WorkloadOverrides network_only;
  network_only.network_only = true;
  const std::string& file = !scenario.empty() ? scenario : config.network.matrix;
  if (file.empty()) {
    const int ranks = run.ranks > 0 ? run.ranks : config.plan.ranks;
    if (ranks <= 0) {
      throw config.error("network.matrix", "is not set and no --scenario FILE was given: plan on the network the job "
                         "will have (geotrain probe writes one), or set plan.ranks = N (--ranks N) for N ranks of one "
                         "host with equal links");
    }
    return equal_links(ranks);
  }
  ConfigNetwork n{io::load_scenario(file, network_only).network, file};
  if (run.ranks > 0 && run.ranks != n.network.device_count) {
    throw InputError("command line: --ranks: is " + std::to_string(run.ranks) + " but " + file + " has " +
                     std::to_string(n.network.device_count) + " devices");
  }
  return n;
}

// Device speed: the config's device.peak_tflops, else the model file's
// [device], else the simulator's default; typed networks per device type.
void set_device_speed(plan::SimulationConfig& sim, const io::Config& config, const io::ModelFile& file,
                      const plan::Network& network) {
  const io::DeviceSpeed device = file.device.value_or(io::DeviceSpeed{});
  sim.peak_tflops = config.device.peak_tflops > 0 ? config.device.peak_tflops : device.peak_tflops;
  sim.efficiency = device.efficiency;
  if (network.typed()) sim.device_tflops = network.device_tflops(sim.peak_tflops);
}

// pipeline.layout = fixed: the stages and replicas the config and rank count
// give, placed as pipeline.placement says (runtime: plan_job).
plan::Layout fixed_layout(const io::Config& config, const ModelShape& model, const plan::Network& network,
                          const plan::SimulationConfig& sim) {
  const int ranks = network.device_count, tp = config.pipeline.tensor_parallel;
  const int pp = config.pipeline.stages, dp = ranks / tp / pp;
  std::vector<std::vector<int>> groups;  // consecutive ranks, as the job forms them
  for (int first = 0; tp > 1 && first < ranks; first += tp) {
    groups.emplace_back();
    for (int j = 0; j < tp; ++j) groups.back().push_back(first + j);
  }
  const plan::Network units = tp > 1 ? plan::counterpart_network(network, groups) : network;
  const plan::SearchOptions search = io::placement_search_options(config);
  const plan::Workload workload =
      plan::workload_from_model(io::training_shape(config, model, io::global_batch_sequences(config, ranks)), pp, dp);
  plan::Plan placed = plan::make_placement(plan::CostModel(units, workload), config.pipeline.placement, search).plan;
  if (tp > 1) {
    placed.tensor_parallel = tp;
    placed.tensor_groups = groups;
  }
  plan::LayoutOptions options;
  options.memory.activation_storage = config.device.activation_storage;
  return plan::evaluate_layout(network, sim, placed, options);
}

// pipeline.layout = auto: the layout search the job runs on rank 0.
plan::Layout searched_layout(const io::Config& config, const plan::Network& network, const plan::SimulationConfig& sim) {
  try {
    return plan::search_layout(network, sim, io::layout_search_options(config));
  } catch (const std::exception& e) {
    throw config.error("pipeline.layout", std::string("auto: ") + e.what());
  }
}

struct ConfigRun {
  io::Config config;
  ConfigNetwork network;
  plan::Layout layout;
  double peak_tflops = 0, efficiency = 0;  // untyped devices, as priced
};

ConfigRun price_config(const ConfigRunOptions& run, const std::string& scenario) {
  ConfigRun r{io::load_config(run.config_file, run.overrides), {}, {}, 0, 0};
  const io::Config& config = r.config;
  if (!config.pipeline.plan_file.empty()) {
    throw config.error("pipeline.plan_file", "is the plan already: `geotrain plan CONFIG` prices what the job would "
                       "choose; drop pipeline.plan_file to see it");
  }
  const io::ModelFile file = io::load_model(config);
  r.network = config_network(run, scenario, config);
  const int ranks = r.network.network.device_count;
  io::check_rank_count(config, file.model, ranks);
  plan::SimulationConfig sim = io::simulation_config(config, file.model, io::global_batch_sequences(config, ranks));
  set_device_speed(sim, config, file, r.network.network);
  r.peak_tflops = sim.peak_tflops;
  r.efficiency = sim.efficiency;
  r.layout = config.pipeline.layout == LayoutChoice::automatic ? searched_layout(config, r.network.network, sim)
                                                               : fixed_layout(config, file.model, r.network.network, sim);
  return r;
}

std::string layout_line(const ConfigRun& r) {
  const plan::Layout& l = r.layout;
  std::ostringstream out;
  out << "layout (" << to_string(r.config.pipeline.layout) << "): ";
  if (l.plan.tensor_parallel > 1) out << l.plan.tensor_parallel << "-way tensor-parallel units x ";
  out << l.plan.pipeline_stages << " stages x " << l.plan.data_parallel << " replicas, " << l.micro_batches
      << " micro-batches of " << l.micro_batch_sequences << " sequences per replica";
  if (l.micro_batches_per_flush < l.micro_batches) out << " in flushes of " << l.micro_batches_per_flush;
  out << ", layers [";
  for (std::size_t s = 0; s < l.layers_per_stage.size(); ++s) out << (s ? " " : "") << l.layers_per_stage[s];
  out << "]\n";
  return out.str();
}

std::string step_lines(const ConfigRun& r, bool detail) {
  const plan::SimulationResult& s = r.layout.simulation;
  std::ostringstream out;
  out << "predicted step: " << format_number("%.4g", s.iteration_s) << " s; compute utilisation "
      << format_number("%.1f%%", 100 * s.utilisation_mean) << " (mean over devices; lowest "
      << format_number("%.1f%%", 100 * s.utilisation_min) << "), " << format_number("%.0f", s.tokens_per_s)
      << " tokens/s\n";
  if (!detail) return out.str();
  out << "  compute (busiest device)   " << format_number("%.4g", s.compute_s) << " s\n"
      << "  pipeline sends (busiest)   " << format_number("%.4g", s.pipeline_comm_s) << " s\n"
      << "  data-parallel exchange     " << format_number("%.4g", s.datap_comm_s) << " s\n"
      << "  tied embedding exchange    " << format_number("%.4g", s.tied_exchange_s) << " s\n"
      << "  bubble                     " << format_number("%.1f%%", 100 * s.bubble_fraction) << "\n";
  if (r.config.outer.local_steps > 0) {
    out << "  local step / outer wait    " << format_number("%.4g", s.local_step_s) << " / "
        << format_number("%.4g", s.outer_exposed_s) << " s per step\n";
  }
  if (!r.network.network.site_of_device.empty()) {
    out << "  bytes crossing sites       " << format_number("%.4g", s.cross_site_bytes()) << " per step\n";
  }
  return out.str();
}

nlohmann::json run_json(const ConfigRun& r) {
  const plan::Layout& l = r.layout;
  const plan::SimulationResult& s = l.simulation;
  nlohmann::json j;
  j["config"] = r.config.source;
  j["network"] = r.network.source;
  j["devices"] = r.network.network.device_count;
  j["shared_links"] = plan::describe_shared_links(r.network.network);
  j["peak_tflops"] = r.peak_tflops;
  j["efficiency"] = r.efficiency;
  j["layout"] = to_string(r.config.pipeline.layout);
  j["pp"] = l.plan.pipeline_stages;
  j["dp"] = l.plan.data_parallel;
  j["tp"] = l.plan.tensor_parallel;
  j["stages"] = l.plan.stages;
  if (l.plan.tensor_parallel > 1) j["tensor_groups"] = l.plan.tensor_groups;
  j["layers_per_stage"] = l.layers_per_stage;
  j["micro_batch_sequences"] = l.micro_batch_sequences;
  j["micro_batches"] = l.micro_batches;
  j["micro_batches_per_flush"] = l.micro_batches_per_flush;
  j["schedule"] = plan::to_string(r.config.pipeline.schedule);
  j["placement"] = plan::to_string(r.config.pipeline.placement);
  j["idle_devices"] = l.idle_devices;
  j["predicted_iteration_s"] = s.iteration_s;
  j["utilisation_mean"] = s.utilisation_mean;
  j["utilisation_min"] = s.utilisation_min;
  j["tokens_per_s"] = s.tokens_per_s;
  j["compute_s"] = s.compute_s;
  j["pipeline_comm_s"] = s.pipeline_comm_s;
  j["datap_comm_s"] = s.datap_comm_s;
  j["bubble_fraction"] = s.bubble_fraction;
  return j;
}

int report(const ConfigRun& r, bool json, bool detail) {
  if (json) {
    std::cout << run_json(r).dump(2) << "\n";
    return 0;
  }
  std::cout << "config: " << r.config.source << " (what `geotrain train` runs with it)\n"
            << "network: " << r.network.source << "\n"
            << "shared links: " << plan::describe_shared_links(r.network.network) << "\n"
            << "devices: " << format_number("%g", r.peak_tflops) << " TFLOPS peak, training at "
            << format_number("%g", r.efficiency) << " of it"
            << (r.network.network.typed() ? " where the network names no type" : "")
            << " (device.peak_tflops, else the model file's [device], else a V100)\n"
            << layout_line(r)
            << plan::describe_placement(r.layout.plan, plan::to_string(r.config.pipeline.placement), r.network.network)
            << step_lines(r, detail);
  return 0;
}

}  // namespace

void add_config_mode(CLI::App* command, ConfigRunOptions& run, std::vector<std::string> flags_allowed) {
  command->add_option("config", run.config_file,
                      "a training config (TOML), with --section.key=value overrides after it: price what `geotrain "
                      "train CONFIG` would run");
  command->add_option("--ranks", run.ranks, "with CONFIG and no network: plan for this many ranks of one host (the key plan.ranks)")
      ->check(CLI::Range(1, 1000000));
  command->allow_extras();
  flags_allowed.insert(flags_allowed.end(), {"--ranks", "--help"});
  command->callback([command, &run, flags_allowed] {
    run.overrides = command->remaining();
    for (const CLI::Option* option : command->get_options()) {
      const std::string name = option->get_name();
      if (option->count() > 0 && name.rfind("--", 0) == 0 &&
          std::find(flags_allowed.begin(), flags_allowed.end(), name) == flags_allowed.end()) {
        run.scenario_flags_given.push_back(name);
      }
    }
  });
}

CLI::App* add_scenario_command(CLI::App& app, ScenarioCommandOptions& o, const ScenarioCommandText& text) {
  CLI::App* command = app.add_subcommand(text.name, text.description);
  command->add_option("--scenario", o.scenario, std::string(text.scenario) + "; with CONFIG: the network");
  command->add_option("--model", o.model, text.model);
  command->add_option("--pp", o.pp, "pipeline stages D_pp (default: the scenario's [workload])")->check(CLI::PositiveNumber);
  command->add_option("--dp", o.dp, "data-parallel degree D_dp (default: the scenario's [workload])")
      ->check(CLI::PositiveNumber);
  add_config_mode(command, o.run, {"--scenario", "--json"});
  return command;
}

void check_config_mode(const ConfigRunOptions& run, const char* command) {
  if (run.config_file.empty()) {
    if (!run.overrides.empty()) {
      throw InputError("command line: " + run.overrides.front() + ": unknown option (settings as --section.key=value "
                       "need a config file: geotrain " + command + " CONFIG.toml ...)");
    }
    if (run.ranks > 0) throw InputError("command line: --ranks: needs a config file (geotrain " + std::string(command) + " CONFIG.toml --ranks N)");
    return;
  }
  if (!run.scenario_flags_given.empty()) {
    throw InputError("command line: " + run.scenario_flags_given.front() + ": with a config file the run's settings "
                     "come from it: set the matching key instead (--section.key=value; docs/config.md)");
  }
}

int run_plan_for_config(const ConfigRunOptions& run, const std::string& scenario, bool json) {
  return report(price_config(run, scenario), json, false);
}

int run_simulate_for_config(const ConfigRunOptions& run, const std::string& scenario, bool json) {
  return report(price_config(run, scenario), json, true);
}

}  // namespace geotrain::cli
