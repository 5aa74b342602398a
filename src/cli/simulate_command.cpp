// geotrain simulate: the iteration time, throughput and time split of one
// training iteration of a placement on a network (src/plan/simulator.hpp).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

#include "geotrain/cli/commands.hpp"
#include "geotrain/common/errors.hpp"
#include "geotrain/io/config_plan.hpp"
#include "geotrain/io/model_file.hpp"
#include "geotrain/io/scenario.hpp"
#include "compression_options.hpp"
#include "config_run.hpp"
#include "geotrain/plan/flush_advisor.hpp"
#include "geotrain/plan/placement.hpp"
#include "geotrain/plan/simulator.hpp"
#include "plan_report.hpp"

namespace geotrain::cli {
namespace {

// to["name"] = from.name for each member name given (nlohmann's own
// per-member step, as its NLOHMANN_DEFINE_TYPE macros use it).
#define GT_JSON_MEMBERS(to, from, ...)                                      \
  do {                                                                      \
    nlohmann::json& nlohmann_json_j = (to);                                 \
    const auto& nlohmann_json_t = (from);                                   \
    NLOHMANN_JSON_EXPAND(NLOHMANN_JSON_PASTE(NLOHMANN_JSON_TO, __VA_ARGS__)) \
  } while (false)

static_assert(io::DeviceSpeed{}.peak_tflops == plan::kV100PeakTflops &&
                  io::DeviceSpeed{}.efficiency == plan::kCalibratedEfficiency,
              "model-file device defaults and the simulator's must agree");

struct Resolved {
  io::Scenario scenario;
  io::ModelFile model_file;
  plan::SimulationConfig config;
  plan::Placement placement = plan::Placement::planned;
  plan::PlacementResult placed;
  double plan_cost_s = 0;
  plan::SimulationResult result;
  plan::PipelineWork work;
  plan::FlushRecommendation flush;
  bool show_outer = false;  // --local-steps given (even 0): its settings and the bytes crossing sites
  // --synchronous-steps: the same placement's synchronous step, and the run's mean over both phases.
  std::optional<plan::SimulationResult> synchronous;
  int synchronous_steps = 0, run_steps = 0;
};

// The run's mean step over its synchronous start and its local steps; a
// device computes the same in both, so its utilisation scales with the step.
struct RunMean {
  double iteration_s, utilisation_mean, utilisation_min;
};
RunMean run_mean(const Resolved& r) {
  const double local_steps = r.run_steps - r.synchronous_steps;
  const double mean = (r.synchronous_steps * r.synchronous->iteration_s + local_steps * r.result.iteration_s) / r.run_steps;
  const double scale = r.result.iteration_s / mean;
  return {mean, r.result.utilisation_mean * scale, r.result.utilisation_min * scale};
}

bool on_off(const std::string& text) { return text == "on"; }

// The simulation's settings: the model file with the command line's
// overrides, the device, and the runtime's choices (--system, then each option).
void resolve_config(const SimulateCommandOptions& o, Resolved& r) {
  plan::SimulationConfig& c = r.config;
  io::ModelFile& file = r.model_file;
  if (o.layers > 0) file.model.layers = o.layers;
  if (o.vocabulary > 0) file.model.vocabulary = o.vocabulary;
  io::BatchShape batch = file.batch.value_or(io::BatchShape{});
  if (o.batch > 0) batch.global_batch_sequences = o.batch;
  if (o.micro_batch > 0) batch.micro_batch_sequences = o.micro_batch;
  file.batch = batch;
  c.model = io::training_shape(file);
  c.model.wire = traffic_encoding(o.compression);
  c.model.outer = outer_sync(o.outer, o.compression.group_size);
  c.global_batch_sequences = batch.global_batch_sequences;
  c.micro_batch_sequences = batch.micro_batch_sequences;
  const io::DeviceSpeed device = r.model_file.device.value_or(io::DeviceSpeed{});
  c.peak_tflops = o.peak_tflops > 0 ? o.peak_tflops : device.peak_tflops;
  c.efficiency = o.efficiency > 0 ? o.efficiency : device.efficiency;

  // The two runtimes the paper compares (src/plan/README.md, "Simulator"),
  // and geotrain's own as `train` runs with the default settings (the one
  // mapping from a config, io/config_plan.hpp).
  const bool megatron = o.system == "megatron", geotrain = o.system == "geotrain";
  c.schedule = megatron ? plan::Schedule::one_f_one_b : plan::Schedule::gpipe;
  c.overlap_communication = !megatron;
  c.dp_scheme = megatron ? plan::DataParallelScheme::ring : plan::DataParallelScheme::paper;
  c.micro_batches_per_flush = megatron ? 0 : 64;
  if (geotrain) {
    const plan::SimulationConfig runtime = io::simulation_config(io::Config{}, file.model, c.global_batch_sequences);
    c.schedule = runtime.schedule;
    c.overlap_communication = runtime.overlap_communication;
    c.dp_scheme = runtime.dp_scheme;
    c.micro_batches_per_flush = runtime.micro_batches_per_flush;
    c.gradient_bucket_mb = runtime.gradient_bucket_mb;
  }
  if (!o.schedule.empty()) plan::parse_schedule(o.schedule, &c.schedule);
  if (!o.dp_scheme.empty()) plan::parse_dp_scheme(o.dp_scheme, &c.dp_scheme);
  if (!o.overlap.empty()) c.overlap_communication = on_off(o.overlap);
  if (o.pipeline_micro_batches >= 0) c.micro_batches_per_flush = o.pipeline_micro_batches;
  if (o.flushless) {
    if (c.schedule != plan::Schedule::one_f_one_b && !o.schedule.empty()) {
      throw InputError("command line: --flushless: needs --schedule 1f1b (one unbroken 1F1B stream)");
    }
    if (o.pipeline_micro_batches > 0) throw InputError("command line: --flushless: has no flushes (drop --pipeline-micro-batches)");
    c.schedule = plan::Schedule::one_f_one_b;
    c.micro_batches_per_flush = 0;
    c.flushless = true;
    c.flushless_ahead = o.flushless_ahead;
  } else if (o.flushless_ahead != 0) {
    throw InputError("command line: --flushless-ahead: needs --flushless");
  }
  c.recompute = on_off(o.recompute);
  if (o.gradient_bucket_mb >= 0) c.gradient_bucket_mb = o.gradient_bucket_mb;
  if (o.untied_head && o.lm_head == "off") throw InputError("--untied-head needs the LM head (--lm-head on)");
  c.lm_head = o.lm_head.empty() ? (o.untied_head || geotrain) : on_off(o.lm_head);
  c.tied_head = !o.untied_head;
  plan::parse_flops_formula(o.flops_formula, &c.flops_formula);
}

Resolved resolve(const SimulateCommandOptions& o) {
  Resolved r;
  io::WorkloadOverrides overrides;
  if (o.pp > 0) overrides.pipeline_stages = o.pp;
  if (o.dp > 0) overrides.data_parallel = o.dp;
  r.scenario = io::load_scenario(o.scenario, overrides);
  for (double& b : r.scenario.network.bandwidth_bytes_per_s) b *= o.bandwidth_scale;
  for (double& b : r.scenario.network.shared.nic_bytes_per_s) b *= o.bandwidth_scale;
  for (auto& [site, b] : r.scenario.network.shared.site_uplink_bytes_per_s) b *= o.bandwidth_scale;
  r.model_file = io::load_model_file(o.model);
  resolve_config(o, r);
  check_outer_sites(r.config.model.outer, r.scenario.network, o.scenario);
  r.show_outer = o.outer.given();
  // Typed devices (the scenario's [device_types]) run at their own TFLOPS.
  if (r.scenario.network.typed()) r.config.device_tflops = r.scenario.network.device_tflops(r.config.peak_tflops);
  const plan::SimulationConfig& c = r.config;
  plan::parse_placement(o.placement, &r.placement);

  const int pp = r.scenario.workload.pipeline_stages, dp = r.scenario.workload.data_parallel;
  try {
    r.work = plan::pipeline_work(c, pp, dp);
  } catch (const std::exception& e) {
    // Shapes from the model file and the command line that do not fit together.
    throw InputError(o.model + " with " + o.scenario + ": " + e.what() +
                     " (see --layers, --batch, --micro-batch, --pipeline-micro-batches, --pp, --dp)");
  }

  if (c.flushless && r.work.micro_batches_per_flush < plan::flushless_slots(pp, c.flushless_ahead)) {
    throw InputError("command line: --flushless: needs at least (1 + ahead) x (pp - 1) + 1 = " +
                     std::to_string(plan::flushless_slots(pp, c.flushless_ahead)) + " micro-batches per replica, got " +
                     std::to_string(r.work.micro_batches_per_flush) + " (raise --batch or lower --micro-batch)");
  }

  // The placement is planned for the model simulated (its compression
  // included), not the scenario's.
  r.scenario.workload = plan::workload_from_model(c.model, pp, dp);
  const plan::CostModel cost_model(r.scenario.network, r.scenario.workload);
  plan::SearchOptions search;
  search.seed = o.seed;
  search.candidates = o.candidates;
  r.placed = plan::make_placement(cost_model, r.placement, search);
  r.plan_cost_s = r.placed.plan.cost.total_s();
  r.result = plan::simulate(r.scenario.network, r.placed.plan, c, o.timeline);
  if (o.synchronous_steps > 0) {
    if (!c.model.outer.enabled()) throw InputError("command line: --synchronous-steps: needs --local-steps >= 1");
    if (o.run_steps <= o.synchronous_steps) {
      throw InputError("command line: --steps: the run's steps must be more than --synchronous-steps " +
                       std::to_string(o.synchronous_steps) + ", got " + std::to_string(o.run_steps));
    }
    // The runtime's compression.gradients is both wires: the pseudo-gradient's, and every step's sum before.
    plan::SimulationConfig synchronous = c;
    if (c.model.outer.wire && !c.model.wire.gradients) synchronous.model.wire.gradients = c.model.outer.wire;
    synchronous.model.outer = plan::OuterSync{};
    r.synchronous = plan::simulate(r.scenario.network, r.placed.plan, synchronous, false);
    r.synchronous_steps = o.synchronous_steps;
    r.run_steps = o.run_steps;
  } else if (o.run_steps > 0) {
    throw InputError("command line: --steps: needs --synchronous-steps (the run's mean over its two phases)");
  }
  // A flushless stream has no flush to size.
  if (!o.timeline && !c.flushless) r.flush = plan::recommend_flush(r.scenario.network, r.placed.plan, c, o.flush_tolerance);
  return r;
}

std::string render_recommendation(const plan::FlushRecommendation& f) {
  const plan::FlushCandidate &choice = f.choice(), &best = f.candidates[f.best];
  std::ostringstream out;
  out << "Recommendation: " << choice.micro_batches_per_flush << " micro-batches per flush (utilisation "
      << format_number("%.1f%%", 100 * choice.utilisation_mean) << ", iteration " << format_number("%.4f", choice.iteration_s)
      << " s): the smallest flush within " << format_number("%g%%", 100 * f.tolerance) << " of the best, "
      << best.micro_batches_per_flush << " (" << format_number("%.1f%%", 100 * best.utilisation_mean) << ")\n  flush:";
  for (const auto& candidate : f.candidates) {
    out << " " << candidate.micro_batches_per_flush << format_number(" %.1f%%", 100 * candidate.utilisation_mean);
  }
  out << "\n";
  return out.str();
}

std::string head_text(const plan::SimulationConfig& c) {
  if (!c.lm_head) return "off";
  return c.tied_head ? "on (tied: wte's gradient swapped between first and last stage)" : "on (untied)";
}

// Bytes crossing sites per step, data parallel amortised over the local steps.
std::string render_cross_site(const Resolved& r) {
  const auto& res = r.result;
  if (r.scenario.network.site_of_device.empty()) return "  crossing sites   n/a (the network has no sites)\n";
  return "  crossing sites   " + format_number("%12.4g", res.cross_site_bytes()) + "   bytes per step: pipeline " +
         format_number("%.4g", res.cross_site_pipeline_bytes) + ", data parallel " +
         format_number("%.4g", res.cross_site_datap_bytes) + ", tied embedding " +
         format_number("%.4g", res.cross_site_tied_bytes) + "\n";
}

std::string render_results(const Resolved& r) {
  const auto& c = r.config;
  const auto& res = r.result;
  std::ostringstream out;
  out << "\nOne iteration (seconds):\n"
      << "  iteration        " << format_number("%12.4f", res.iteration_s) << "\n"
      << "  pipeline phase   " << format_number("%12.4f", res.pipeline_phase_s) << "   start to the last backward (slowest replica)\n"
      << "  compute          " << format_number("%12.4f", res.compute_s) << "   busiest device, forward + backward\n"
      << "  pipeline sends   " << format_number("%12.4f", res.pipeline_comm_s)
      << "   busiest device's links busy sending activations + gradients (bytes/beta)\n"
      << "  DP exchange      " << format_number("%12.4f", res.datap_comm_s)
      << (!c.model.outer.enabled()    ? "   slowest stage group\n"
          : c.model.outer.within_site ? "   slowest site's sum every step + slowest stage group's sync / H\n"
                                      : "   slowest stage group's sync / H (per step)\n")
      << "  bubble           " << format_number("%11.1f%%", 100 * res.bubble_fraction)
      << "   share of the pipeline phase without compute\n";
  if (res.tied_exchange_s > 0) {
    out << "  tied embedding   " << format_number("%12.4f", res.tied_exchange_s)
        << "   first <-> last stage swap of wte's gradient (slowest replica), after their DP exchanges\n";
  }
  if (c.model.outer.enabled()) {
    out << "  local step       " << format_number("%12.4f", res.local_step_s)
        << (c.model.outer.within_site ? "   a step with its sites' sums, without traffic between sites\n"
                                      : "   a step without data-parallel traffic\n")
        << "  outer sync wait  " << format_number("%12.4f", res.outer_exposed_s)
        << "   per step: what the steps wait for the syncs, amortised over H\n";
  }
  if (r.show_outer) out << render_cross_site(r);
  out << "  utilisation      " << format_number("%11.1f%%", 100 * res.utilisation_mean) << format_number("   mean, %.1f%% min", 100 * res.utilisation_min)
      << " over devices: compute / iteration\n";
  if (r.synchronous) {
    const RunMean mean = run_mean(r);
    out << "  synchronous step " << format_number("%12.4f", r.synchronous->iteration_s) << "   the same placement, "
        << "a gradient exchange every step (the first " << r.synchronous_steps << " steps)\n"
        << "  run mean         " << format_number("%12.4f", mean.iteration_s) << "   per step over " << r.run_steps
        << " steps, utilisation " << format_number("%.1f%% mean", 100 * mean.utilisation_mean)
        << format_number(", %.1f%% min", 100 * mean.utilisation_min) << "\n";
  }
  out
      << "Throughput: " << format_number("%.4f", res.pflops) << " PFLOPS (" << plan::to_string(c.flops_formula) << " FLOP count, "
      << format_number("%.4g", res.flops_per_iteration) << " per iteration), " << format_number("%.0f", res.tokens_per_s) << " tokens/s\n";
  if (!r.flush.candidates.empty()) out << render_recommendation(r.flush);
  return out.str();
}

std::string render_table(const Resolved& r) {
  const auto& c = r.config;
  const auto& res = r.result;
  const auto& plan = r.placed.plan;
  std::ostringstream out;
  out << "geotrain simulate: " << (r.scenario.name.empty() ? r.scenario.path : r.scenario.name) << ", "
      << r.scenario.network.device_count << " devices = " << plan.pipeline_stages << " stages x " << plan.data_parallel
      << " replicas\n"
      << "  model " << c.model.name << ": " << c.model.layers << " layers, hidden " << c.model.hidden << ", sequence "
      << c.model.sequence_length << ", vocabulary " << c.model.vocabulary << "; batch " << c.global_batch_sequences
      << " sequences, micro-batch " << c.micro_batch_sequences << "\n"
      << "  device " << format_number("%g", c.peak_tflops) << " TFLOPS peak x " << format_number("%g", c.efficiency) << " = "
      << format_number("%.4g", c.peak_tflops * c.efficiency) << " TFLOPS each\n"
      << "  placement " << plan::to_string(r.placement) << " (cost model " << format_number("%.5f", r.plan_cost_s) << " s";
  if (r.placement == plan::Placement::planned) out << ", planner " << format_number("%.2f", r.placed.planner_seconds) << " s";
  out << "); schedule " << plan::to_string(c.schedule) << (c.flushless ? " flushless (PipeDream-2BW: a step is the stream's steady advance)" : "") << ", " << res.micro_batches << " micro-batches per replica = "
      << res.flushes << " flush" << (res.flushes > 1 ? "es" : "") << " of " << res.micro_batches_per_flush << "\n"
      << "  communication " << (c.overlap_communication ? "overlapped with compute" : "blocking (batched p2p)")
      << ", data parallel " << describe_dp_scheme(c.dp_scheme, res.stage_dp_scheme)
      << (c.gradient_bucket_mb > 0 ? " in buckets of " + format_number("%g", c.gradient_bucket_mb) + " MiB from the last backward"
                                   : std::string(" after the backward"))
      << ", recomputation " << (c.recompute ? "on" : "off") << ", LM head " << head_text(c) << "\n"
      << "  shared links: " << plan::describe_shared_links(r.scenario.network) << "\n"
      << "  wire: "
      << describe_traffic(c.model, static_cast<double>(c.micro_batch_sequences) * c.model.sequence_length * c.model.hidden,
                          plan::stage_parameters(c.model, 0, plan.pipeline_stages))
      << "\n";
  if (r.show_outer) out << "  outer: " << describe_outer(c.model.outer) << "\n";
  out << "\n";

  out << "Stages (times per micro-batch; stages[s][r] sends to stages[s+1][r]):\n"
      << "  stage  forward ms  backward ms  gradient MB  DP exchange s  last backward s  devices by replica\n";
  for (int s = 0; s < plan.pipeline_stages; ++s) {
    const std::string devices = device_list(plan.stages[s]);
    char line[512];
    std::snprintf(line, sizeof line, "  %5d  %10.3f  %11.3f  %11.1f  %13.3f  %15.3f  %s\n", s, 1e3 * r.work.forward_s[s],
                  1e3 * r.work.backward_s[s], r.work.gradient_bytes[s] / 1e6, res.stage_datap_s[s],
                  res.stage_last_backward_s[s], devices.c_str());
    out << line;
  }
  out << render_results(r);
  return out.str();
}

nlohmann::json encoding_json(const std::optional<WireEncoding>& e) {
  if (!e) return nullptr;  // the model's bytes per value
  return {{"format", to_string(e->format)}, {"group_size", e->group_size}, {"topk_fraction", e->topk_fraction}};
}

// What the wire carries, the tied head, utilisation and the flush advice.
void add_extension_json(const Resolved& r, nlohmann::json& j) {
  const auto& wire = r.config.model.wire;
  j["compression"] = {{"activations", encoding_json(wire.activations)},
                      {"activation_gradients", encoding_json(wire.activation_gradients)},
                      {"gradients", encoding_json(wire.gradients)},
                      {"tied_embedding", encoding_json(wire.tied_embedding)}};
  j["activation_gradient_bytes"] = r.work.activation_gradient_bytes.value_or(r.work.activation_bytes);
  j["tied_head"] = r.config.lm_head && r.config.tied_head;
  j["tied_embedding_bytes"] = r.work.tied_embedding_bytes;
  GT_JSON_MEMBERS(j, r.result, tied_exchange_s, utilisation_mean, utilisation_min);
  const plan::FlushRecommendation& f = r.flush;
  if (f.candidates.empty()) return;  // flushless: no flush to recommend
  nlohmann::json candidates = nlohmann::json::array();
  for (const auto& c : f.candidates) {
    candidates.push_back({{"micro_batches_per_flush", c.micro_batches_per_flush}, {"iteration_s", c.iteration_s},
                          {"utilisation_mean", c.utilisation_mean}, {"utilisation_min", c.utilisation_min}});
  }
  j["recommendation"] = {{"micro_batches_per_flush", f.choice().micro_batches_per_flush},
                         {"utilisation_mean", f.choice().utilisation_mean},
                         {"iteration_s", f.choice().iteration_s},
                         {"best_micro_batches_per_flush", f.candidates[f.best].micro_batches_per_flush},
                         {"tolerance", f.tolerance},
                         {"candidates", candidates}};
}

// Local steps and the bytes crossing sites (only with --local-steps, so the
// synchronous output stays as it was).
void add_outer_json(const Resolved& r, nlohmann::json& j) {
  const plan::OuterSync& outer = r.config.model.outer;
  const auto& res = r.result;
  j["local_steps"] = outer.local_steps;
  j["outer_wire"] = outer.enabled() ? encoding_json(outer.wire.value_or(WireEncoding{})) : nullptr;
  j["outer_fragments"] = outer.fragments;
  j["outer_within_site"] = outer.within_site;
  GT_JSON_MEMBERS(j, res, local_step_s, outer_exposed_s);
  const bool sites = !r.scenario.network.site_of_device.empty();
  j["cross_site_bytes_per_step"] = sites ? nlohmann::json(res.cross_site_bytes()) : nlohmann::json(nullptr);
  j["cross_site_pipeline_bytes"] = sites ? nlohmann::json(res.cross_site_pipeline_bytes) : nlohmann::json(nullptr);
  j["cross_site_datap_bytes"] = sites ? nlohmann::json(res.cross_site_datap_bytes) : nlohmann::json(nullptr);
  j["cross_site_tied_bytes"] = sites ? nlohmann::json(res.cross_site_tied_bytes) : nlohmann::json(nullptr);
}

std::string render_json(const Resolved& r, const SimulateCommandOptions& o) {
  const auto& c = r.config;
  const auto& res = r.result;
  nlohmann::json j;
  j["scenario"] = r.scenario.path;
  j["name"] = r.scenario.name;
  j["devices"] = r.scenario.network.device_count;
  j["pp"] = r.placed.plan.pipeline_stages;
  j["dp"] = r.placed.plan.data_parallel;
  j["model"] = {{"file", r.model_file.path},        {"name", c.model.name},
                {"layers", c.model.layers},         {"hidden", c.model.hidden},
                {"heads", c.model.heads},           {"sequence_length", c.model.sequence_length},
                {"vocabulary", c.model.vocabulary}};
  j["device"] = {{"peak_tflops", c.peak_tflops}, {"efficiency", c.efficiency}};
  GT_JSON_MEMBERS(j, o, bandwidth_scale, seed, system);
  GT_JSON_MEMBERS(j, r, plan_cost_s);
  j["placement"] = plan::to_string(r.placement);
  j["planner_seconds"] = r.placed.planner_seconds;
  j["schedule"] = plan::to_string(c.schedule);
  j["dp_scheme"] = plan::to_string(c.dp_scheme);
  j["shared_links"] = plan::describe_shared_links(r.scenario.network);
  j["flops_formula"] = plan::to_string(c.flops_formula);
  GT_JSON_MEMBERS(j, c, global_batch_sequences, micro_batch_sequences, flushless, flushless_ahead, overlap_communication,
                  recompute, gradient_bucket_mb, lm_head);
  GT_JSON_MEMBERS(j, res, micro_batches, micro_batches_per_flush, flushes, iteration_s, pipeline_phase_s, compute_s,
                  pipeline_comm_s, datap_comm_s, bubble_fraction, flops_per_iteration, pflops, tokens_per_s,
                  stage_datap_s, stage_last_backward_s);
  GT_JSON_MEMBERS(j, r.work, activation_bytes);
  j["stage_forward_s"] = r.work.forward_s;
  j["stage_backward_s"] = r.work.backward_s;
  j["stage_gradient_bytes"] = r.work.gradient_bytes;
  j["stage_dp_scheme"] = scheme_names(res.stage_dp_scheme);
  j["stages"] = r.placed.plan.stages;
  add_extension_json(r, j);
  if (r.show_outer) add_outer_json(r, j);
  if (r.synchronous) {
    const RunMean mean = run_mean(r);
    j["synchronous_start"] = {{"synchronous_steps", r.synchronous_steps}, {"run_steps", r.run_steps},
                              {"synchronous_iteration_s", r.synchronous->iteration_s},
                              {"mean_iteration_s", mean.iteration_s}, {"utilisation_mean", mean.utilisation_mean},
                              {"utilisation_min", mean.utilisation_min}};
  }
  return j.dump(2) + "\n";
}

const ScenarioCommandText kSimulateText{
    "simulate",
    "Simulate one training iteration (time, PFLOPS, split): of a training config as `train` would run it "
    "(geotrain simulate CONFIG.toml [--section.key=value ...]), or of a placement on a scenario (--scenario FILE "
    "--model FILE)",
    "scenario TOML file (the network; pp x dp from its [workload])",
    "model TOML file ([model], optional [device] and [batch]); not with CONFIG"};

std::string render_timeline(const Resolved& r) {
  std::ostringstream out;
  out << "replica,stage,device,step,start_s,end_s\n";
  for (const plan::TraceEvent& e : r.result.trace) {
    out << e.replica << "," << e.stage << "," << r.placed.plan.stages[e.stage][e.replica] << ","
        << plan::to_string(e.step) << "," << format_number("%.9g", e.start_s) << "," << format_number("%.9g", e.end_s) << "\n";
  }
  return out.str();
}

}  // namespace

void add_simulate_command(CLI::App& app, SimulateCommandOptions& o) {
  CLI::App* sim = add_scenario_command(app, o, kSimulateText);
  sim->add_option("--layers", o.layers, "transformer layers (default: the model file)")->check(CLI::PositiveNumber);
  sim->add_option("--vocabulary", o.vocabulary, "vocabulary size (default: the model file)")->check(CLI::PositiveNumber);
  sim->add_option("--batch", o.batch, "global batch in sequences (default: [batch] or 1024)")->check(CLI::PositiveNumber);
  sim->add_option("--micro-batch", o.micro_batch, "sequences per micro-batch (default: [batch] or 1)")
      ->check(CLI::PositiveNumber);
  sim->add_option("--pipeline-micro-batches", o.pipeline_micro_batches,
                  "micro-batches per pipeline flush, the rest by gradient accumulation; 0 = all in one "
                  "(default: dtfm 64, megatron 0)")
      ->check(CLI::Range(0, 1 << 30));
  sim->add_option("--peak-tflops", o.peak_tflops, "device peak TFLOPS (default: [device] or 125, V100 fp16)")
      ->check(CLI::Range(1e-6, 1e6));
  sim->add_option("--efficiency", o.efficiency, "achieved / peak compute (default: [device] or 0.34, calibrated)")
      ->check(CLI::Range(1e-6, 1.0));
  sim->add_option("--bandwidth-scale", o.bandwidth_scale,
                  "multiply every bandwidth of the scenario (e.g. 8: data-centre numbers as GB/s)")
      ->check(CLI::Range(1e-9, 1e9));
  sim->add_option("--placement", o.placement, "planned, rank-order (Megatron/DeepSpeed), dtfm-rank-order, random")
      ->check(CLI::IsMember({"planned", "rank-order", "dtfm-rank-order", "random"}));
  sim->add_option("--system", o.system,
                  "runtime preset: dtfm (GPipe, overlapped p2p, paper DP, flushes of 64), megatron "
                  "(1F1B, blocking p2p, ring all-reduce, one flush) or geotrain (1F1B, overlapped p2p, direct DP "
                  "in 25 MiB buckets from the last backward, one flush, tied LM head)")
      ->check(CLI::IsMember({"dtfm", "megatron", "geotrain"}));
  sim->add_option("--schedule", o.schedule, "gpipe or 1f1b (default: by --system)")->check(CLI::IsMember({"gpipe", "1f1b"}));
  sim->add_flag("--flushless", o.flushless,
                "pipeline.flushless (PipeDream-2BW): 1F1B with no flush between steps, a step timed as the unbroken "
                "stream's steady advance; the data-parallel sum still follows each step's backward");
  sim->add_option("--flushless-ahead", o.flushless_ahead,
                  "pipeline.flushless_ahead: forwards each stage runs ahead of its backwards beyond 1F1B's")
      ->check(CLI::NonNegativeNumber);
  sim->add_option("--dp-scheme", o.dp_scheme, "paper (DATAP), ring, central, direct, hierarchical (sum inside sites first) or auto (per group, "
                  "direct or hierarchical, whichever is predicted faster: the runtime's network.dp_exchange) "
                  "(default: by --system)")
      ->check(CLI::IsMember({"paper", "ring", "central", "direct", "hierarchical", "auto"}));
  sim->add_option("--overlap", o.overlap, "on: sends overlap compute; off: blocking p2p (default: by --system)")
      ->check(CLI::IsMember({"on", "off"}));
  sim->add_option("--gradient-bucket-mb", o.gradient_bucket_mb,
                  "data-parallel sums start in buckets of this many MiB (fp32) during the last backward, as "
                  "geotrain's network.gradient_bucket_mb; 0 = after the backward (default: by --system)")
      ->check(CLI::Range(0.0, 1e6));
  sim->add_option("--recompute", o.recompute, "activation recomputation (on: backward = 3 forwards)")
      ->check(CLI::IsMember({"on", "off"}));
  sim->add_option("--lm-head", o.lm_head, "logits over the vocabulary on the last stage (default off)")
      ->check(CLI::IsMember({"on", "off"}));
  sim->add_flag("--untied-head", o.untied_head,
                "the LM head is its own V x h matrix on the last stage (implies --lm-head on); default: tied to "
                "wte, whose gradient the first and last stage swap every iteration");
  add_compression_options(sim, o.compression);
  add_outer_options(sim, o.outer);
  sim->add_option("--synchronous-steps", o.synchronous_steps,
                  "local steps after this many synchronous steps (outer.synchronous_steps): also times the "
                  "placement's synchronous step and the mean over a run of --steps")
      ->check(CLI::Range(0, 1 << 30));
  sim->add_option("--steps", o.run_steps, "the run's steps, for --synchronous-steps' mean")->check(CLI::Range(0, 1 << 30));
  sim->add_option("--flush-tolerance", o.flush_tolerance,
                  "recommendation: the smallest flush whose utilisation is within this share of the best (0.02)")
      ->check(CLI::Range(0.0, 0.99));
  sim->add_option("--flops-formula", o.flops_formula, "FLOP count for PFLOPS: paper, megatron, executed")
      ->check(CLI::IsMember({"paper", "megatron", "executed"}));
  sim->add_option("--seed", o.seed, "seed of the planner and of the random placement");
  sim->add_option("--candidates", o.candidates, "planner: evaluated candidates")->check(CLI::Range(2, 100000000));
  sim->add_flag("--json", o.json, "print one JSON object instead of the table");
  sim->add_flag("--timeline", o.timeline,
                "print every timed step as CSV (replica,stage,device,step,start_s,end_s); with --flushless, the "
                "stream of " + std::to_string(plan::kFlushlessSteps) + " steps, its micro-batches numbered through");
}

int run_simulate_command(const SimulateCommandOptions& o) {
  check_config_mode(o.run, "simulate");
  if (!o.run.config_file.empty()) return run_simulate_for_config(o.run, o.scenario, o.json);
  if (o.scenario.empty() || o.model.empty()) {
    throw InputError("command line: simulate needs a training config (geotrain simulate CONFIG.toml) or --scenario "
                     "FILE and --model FILE");
  }
  const Resolved r = resolve(o);
  if (o.timeline) std::cout << render_timeline(r);
  else std::cout << (o.json ? render_json(r, o) : render_table(r));
  return 0;
}

}  // namespace geotrain::cli
