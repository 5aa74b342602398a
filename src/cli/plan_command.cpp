#include <CLI/CLI.hpp>
#include <iostream>

#include "geotrain/cli/commands.hpp"
#include "geotrain/common/errors.hpp"
#include "geotrain/io/model_file.hpp"
#include "compression_options.hpp"
#include "config_run.hpp"
#include "geotrain/plan/search.hpp"
#include "launch_files.hpp"
#include "plan_layout.hpp"
#include "plan_report.hpp"

namespace geotrain::cli {

namespace {

void add_layout_options(CLI::App* plan, PlanCommandOptions& o) {
  plan->add_option("--layout", o.layout,
                   "auto: search pp, dp, micro-batch, layers per stage and idle devices (only --pp/--dp fix "
                   "degrees); fixed: the given degrees (default: auto when no pp/dp is given anywhere)")
      ->check(CLI::IsMember({"auto", "fixed"}));
  plan->add_option("--batch", o.batch, "global batch in sequences (default: --model's [batch], else the scenario's)")
      ->check(CLI::PositiveNumber);
  plan->add_option("--micro-batch", o.micro_batch, "sequences per micro-batch (default: searched; fixed layout 1)")
      ->check(CLI::PositiveNumber);
  plan->add_option("--pipeline-micro-batches", o.pipeline_micro_batches,
                   "micro-batches per flush (default: searched for GPipe, one flush for 1F1B)")
      ->check(CLI::PositiveNumber);
  plan->add_option("--schedule", o.schedule, "1f1b (the runtime's default) or gpipe")->check(CLI::IsMember({"gpipe", "1f1b"}));
  plan->add_option("--dp-scheme", o.dp_scheme, "direct, hierarchical or auto (geotrain's exchanges, network.dp_exchange; auto: per group, whichever is "
                   "predicted faster), ring, central or paper")
      ->check(CLI::IsMember({"paper", "ring", "central", "direct", "hierarchical", "auto"}));
  plan->add_option("--recompute", o.recompute, "activation recomputation (off: the runtime keeps all activations)")
      ->check(CLI::IsMember({"on", "off"}));
  plan->add_option("--activation-storage", o.activation_storage,
                   "how each layer's activations are kept for the backward, as device.activation_storage (fp32, bf16)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  plan->add_option("--lm-head", o.lm_head,
                   "the tied head's compute and first-last gradient swap (default on, as the runtime; memory always "
                   "counts the head)")
      ->check(CLI::IsMember({"on", "off"}));
  plan->add_option("--gradient-bucket-mb", o.gradient_bucket_mb,
                   "DP sum in buckets during the backward, as network.gradient_bucket_mb (default 25; 0: after it)")
      ->check(CLI::Range(0.0, 1e6));
  plan->add_option("--peak-tflops", o.peak_tflops, "TFLOPS of devices without a type (default: --model or 125)")
      ->check(CLI::Range(1e-6, 1e6));
  plan->add_option("--efficiency", o.efficiency, "achieved / peak (default: --model or 0.34)")->check(CLI::Range(1e-6, 1.0));
  plan->add_option("--device-memory-gib", o.device_memory_gib, "memory of devices without a type (default: unlimited)")
      ->check(CLI::Range(0.0, 1e9));
  plan->add_option("--memory-reserve-gib", o.memory_reserve_gib, "per device, outside the model (default 1)")
      ->check(CLI::Range(0.0, 1e9));
}

int run_layout_search(const PlanCommandOptions& o, const io::Scenario& scenario, const std::string& why) {
  const LayoutSettings settings = layout_settings(o, scenario);
  const plan::Layout layout = search_layout_for(scenario, settings);
  const std::string json = render_layout_plan_json(scenario, layout, settings);
  std::cout << (o.json ? json : render_layout_plan_table(scenario, layout, settings, why));
  if (!o.json_out.empty()) write_text_file(o.json_out, json, "--out");
  write_launch_files(scenario.network, o.scenario, {o.rankfile, o.hostfile, o.slurm_hostfile});
  return 0;
}

const ScenarioCommandText kPlanText{
    "plan",
    "Compute the tasklet allocation: for a training config as `train` would run it (geotrain plan CONFIG.toml "
    "[--section.key=value ...]), or for a network scenario (--scenario FILE)",
    "scenario TOML file (site-based or full matrix)",
    "model TOML file to plan for (default: the scenario's [workload] model)"};

}  // namespace

void add_plan_command(CLI::App& app, PlanCommandOptions& o) {
  CLI::App* plan = add_scenario_command(app, o, kPlanText);
  plan->add_option("--tp", o.tp,
                   "tensor-parallel degree for the layout search (devices of one node per unit; default: searched "
                   "over 1, 2, 4, 8 where they divide the heads and fit a node)")
      ->check(CLI::PositiveNumber);
  plan->add_option("--tp-efficiency", o.tp_efficiency,
                   "a tensor-parallel unit's speed as a share of its devices' (what the split kernels lose, measured "
                   "or assumed; the all-reduces are priced separately; default 1)")
      ->check(CLI::Range(0.01, 1.0));
  plan->add_option("--seed", o.seed, "random seed; the same seed gives the same plan");
  plan->add_option("--candidates", o.candidates,
                   "evaluated candidates per island (initial population included); the layout search: per "
                   "placement search (default 1000)")
      ->check(CLI::Range(2, 100000000))
      ->each([&o](const std::string&) { o.candidates_given = true; });
  plan->add_option("--random-samples", o.random_samples, "random placements for the random-best baseline")
      ->check(CLI::Range(1, 100000000));
  plan->add_option("--local-search", o.local_search, "swap (geotrain), paper (the original's), none")
      ->check(CLI::IsMember({"swap", "paper", "none"}));
  plan->add_flag("--paper-exact", o.paper_exact,
                 "the original scheduler exactly: paper local search, its replacement and off-by-one bugs, "
                 "random initial population");
  plan->add_option("--islands", o.islands, "independent populations; the best wins")->check(CLI::Range(1, 1024));
  plan->add_option("--threads", o.threads, "threads running islands (does not change the result)")
      ->check(CLI::Range(1, 1024));
  add_compression_options(plan, o.compression);
  add_outer_options(plan, o.outer);
  add_layout_options(plan, o);
  plan->add_flag("--json", o.json, "print one JSON object instead of the table");
  plan->add_flag("--no-baselines", o.skip_baselines, "skip the baselines (faster on large networks)");
  plan->add_option("--out", o.json_out, "also write the plan as JSON to this file");
  const char* from_hosts = " from the scenario's network.sites (the host of each rank, as geotrain probe writes them)";
  plan->add_option("--rankfile", o.rankfile, std::string("write an Open MPI rankfile (rank r on device r's host)") + from_hosts);
  plan->add_option("--hostfile", o.hostfile, std::string("write an Open MPI hostfile (host slots=N)") + from_hosts);
  plan->add_option("--slurm-hostfile", o.slurm_hostfile,
                   std::string("write one host per rank, for SLURM_HOSTFILE=FILE srun --distribution=arbitrary") + from_hosts);
}

int run_plan_command(const PlanCommandOptions& o) {
  check_config_mode(o.run, "plan");
  if (!o.run.config_file.empty()) return run_plan_for_config(o.run, o.scenario, o.json);
  if (o.scenario.empty()) throw InputError("command line: plan needs a training config (geotrain plan CONFIG.toml) or --scenario FILE");
  io::WorkloadOverrides overrides;
  if (o.pp > 0) overrides.pipeline_stages = o.pp;
  if (o.dp > 0) overrides.data_parallel = o.dp;
  // --layout auto: only the command line fixes degrees, the file's are not checked.
  overrides.network_only = o.layout == "auto";
  overrides.degrees_optional = o.layout.empty();
  io::Scenario scenario = io::load_scenario(o.scenario, overrides);
  if (o.layout == "auto" || !scenario.degrees_given) {
    return run_layout_search(o, scenario, o.layout == "auto" ? "--layout auto" : "no pp or dp given");
  }
  if (!o.model.empty()) {
    const int pp = scenario.workload.pipeline_stages, dp = scenario.workload.data_parallel;
    scenario.workload = plan::workload_from_model(io::training_shape(io::load_model_file(o.model)), pp, dp);
  }
  // c_PP, its way back and c_DP as the runtime would encode them; with
  // local steps c_DP is the pseudo-gradient, exchanged every H steps.
  const plan::OuterSync outer = outer_sync(o.outer, o.compression.group_size);
  check_outer_sites(outer, scenario.network, o.scenario);
  plan::TrafficEncoding wire = traffic_encoding(o.compression);
  if (outer.enabled()) wire.gradients.reset();
  plan::encode_traffic(scenario.workload, wire);
  plan::apply_outer_sync(scenario.workload, outer);
  const plan::CostModel model(scenario.network, scenario.workload);

  plan::SearchOptions options;
  if (o.paper_exact) {
    options = plan::SearchOptions::paper_configuration(o.seed);
  } else {
    options.seed = o.seed;
    plan::parse_local_search(o.local_search, &options.local_search);
    options.islands = o.islands;
    options.threads = o.threads;
  }
  options.candidates = o.candidates;
  const plan::SearchResult result = plan::search_plan(model, options);

  PlanReport report{&scenario, &options, &result, {}, plan::cost_lower_bound(model)};
  if (!o.skip_baselines) {
    const int k = scenario.workload.pipeline_stages, d = scenario.workload.data_parallel;
    report.baselines.rank_order_cost_s =
        plan::literal_plan(model, plan::megatron_rank_order(k, d)).cost.total_s();
    report.baselines.dtfm_rank_order_cost_s =
        plan::literal_plan(model, plan::dtfm_rank_order(k, d)).cost.total_s();
    report.baselines.random_best_cost_s =
        plan::random_best(model, o.random_samples, o.seed).plan.cost.total_s();
    report.baselines.random_samples = o.random_samples;
    plan::SearchOptions without = options;
    without.local_search = plan::LocalSearch::none;
    without.structured_seeds = false;
    report.baselines.no_local_search_cost_s = plan::search_plan(model, without).plan.cost.total_s();
    report.baselines.computed = true;
  }
  // The placement's predicted iteration and memory, even split, as given.
  const LayoutSettings settings = layout_settings(o, scenario);
  plan::Layout layout;
  try {
    layout = plan::evaluate_layout(scenario.network, settings.config, result.plan, settings.options);
    report.layout = &layout;
    report.layout_settings = &settings;
  } catch (const std::exception& e) {
    report.layout_note = e.what();
  }
  std::cout << (o.json ? render_plan_json(report) : render_plan_table(report));
  if (!o.json_out.empty()) write_text_file(o.json_out, render_plan_json(report), "--out");
  write_launch_files(scenario.network, o.scenario, {o.rankfile, o.hostfile, o.slurm_hostfile});
  return 0;
}

}  // namespace geotrain::cli
