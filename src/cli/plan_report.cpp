#include "plan_report.hpp"

#include "plan_layout.hpp"
#include "text_format.hpp"

#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace geotrain::cli {
namespace {

// "Oregon x8" or "Tokyo x4, Seoul x4": where a stage's devices are.
std::string site_summary(const plan::Network& network, const std::vector<int>& devices) {
  if (network.site_of_device.empty()) return "-";
  std::vector<std::pair<std::string, int>> counts;
  for (int d : devices) {
    const std::string& site = network.site_of_device[d];
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == site; });
    if (it == counts.end()) counts.emplace_back(site, 1); else ++it->second;
  }
  std::string text;
  for (size_t i = 0; i < counts.size() && i < 4; ++i) {
    if (i > 0) text += ", ";
    text += counts[i].first + " x" + std::to_string(counts[i].second);
  }
  if (counts.size() > 4) text += ", +" + std::to_string(counts.size() - 4) + " sites";
  return text;
}

double gap(double cost, double bound) { return cost > 0 ? (cost - bound) / cost : 0.0; }

}  // namespace

std::string render_plan_table(const PlanReport& r) {
  const auto& w = r.scenario->workload;
  const auto& plan = r.result->plan;
  const auto& net = r.scenario->network;
  std::ostringstream out;
  out << "geotrain plan: " << (r.scenario->name.empty() ? r.scenario->path : r.scenario->name) << "\n"
      << "  " << net.device_count << " devices = " << w.pipeline_stages << " stages x " << w.data_parallel
      << " data-parallel replicas; c_PP = " << format_number("%.0f", w.c_pp_bytes) << " bytes"
      << (w.c_pp_gradient_bytes ? " (back " + format_number("%.0f", *w.c_pp_gradient_bytes) + ")" : "") << ", c_DP = "
      << format_number("%.0f", w.c_dp_bytes) << " bytes (" << w.origin << ")\n"
      << "  search: " << plan::to_string(r.options->local_search) << " local search, seed " << r.options->seed
      << ", " << r.result->evaluations << " candidates" << (r.options->paper_bugs ? ", paper-exact" : "")
      << "\n\n";
  out << "Pipeline (stage s of replica r runs on device [s][r]; column r is one pipeline):\n";
  out << "  stage  devices by replica                      sites                      link to next (s)\n";
  for (int s = 0; s < plan.pipeline_stages; ++s) {
    const std::string devices = device_list(plan.stages[s]);
    char line[512];
    std::snprintf(line, sizeof line, "  %5d  %-38s  %-25s  %s\n", s, devices.c_str(),
                  site_summary(net, plan.stages[s]).c_str(),
                  s + 1 < plan.pipeline_stages ? format_number("%.6f", plan.boundary_s[s]).c_str() : "");
    out << line;
  }
  const double total = plan.cost.total_s();
  out << "\nCost per iteration under the model (seconds):\n"
      << "  total      " << format_number("%10.5f", total) << "   = DATAP + pipeline\n"
      << "  DATAP      " << format_number("%10.5f", plan.cost.datap_s) << "   data-parallel gradient exchange, slowest group\n"
      << "  pipeline   " << format_number("%10.5f", plan.cost.pipeline_s) << "   activations forward + gradients back (2 x "
      << format_number("%.5f", plan.cost.pipeline_s / 2) << ")\n"
      << "  lower bound" << format_number("%10.5f", r.lower_bound_s) << "   optimality gap at most "
      << format_number("%.1f%%", 100 * gap(total, r.lower_bound_s)) << "\n";
  if (r.baselines.computed) {
    const auto& b = r.baselines;
    out << "\nBaselines, same cost model (placements scored as they run, no matching or path optimisation):\n"
        << "  rank order, Megatron/DeepSpeed (stage = rank / D_dp)  " << format_number("%10.5f", b.rank_order_cost_s)
        << format_number("   %.2fx ours\n", b.rank_order_cost_s / total)
        << "  rank order, DT-FM (stage = rank mod D_pp)             " << format_number("%10.5f", b.dtfm_rank_order_cost_s)
        << format_number("   %.2fx ours\n", b.dtfm_rank_order_cost_s / total)
        << "  best of " << b.random_samples << " random placements"
        << std::string(b.random_samples < 10000 ? 24 : 23, ' ') << format_number("%10.5f", b.random_best_cost_s)
        << format_number("   %.2fx ours\n", b.random_best_cost_s / total)
        << "  genetic search without local search (scheduled)      " << format_number("%10.5f", b.no_local_search_cost_s)
        << format_number("   %.2fx ours\n", b.no_local_search_cost_s / total);
  }
  if (r.layout != nullptr) {
    out << "\nPredicted with the model, even layer split (geotrain plan --layout auto searches the layout):\n"
        << render_layout_section(*r.layout, *r.scenario, *r.layout_settings);
  } else if (!r.layout_note.empty()) {
    out << "\nNo iteration prediction: " << r.layout_note << "\n";
  }
  out << "\nPlanner time: " << format_number("%.3f s", r.result->seconds) << "\n";
  return out.str();
}

std::string render_layout_plan_table(const io::Scenario& scenario, const plan::Layout& layout,
                                     const LayoutSettings& settings, const std::string& why_auto) {
  const auto& plan = layout.plan;
  std::ostringstream out;
  out << "geotrain plan: " << (scenario.name.empty() ? scenario.path : scenario.name) << ", layout search ("
      << why_auto << ")\n\n"
      << render_layout_section(layout, scenario, settings) << render_layout_reasons(layout)
      << "\nCost model of this placement (DT-FM, seconds): total " << format_number("%.5f", plan.cost.total_s()) << " = DATAP "
      << format_number("%.5f", plan.cost.datap_s) << " + pipeline " << format_number("%.5f", plan.cost.pipeline_s) << "\n"
      << "\nPlanner time: " << format_number("%.3f s", layout.seconds) << "\n";
  return out.str();
}

std::string render_layout_plan_json(const io::Scenario& scenario, const plan::Layout& layout,
                                    const LayoutSettings& settings) {
  nlohmann::json j;
  j["scenario"] = scenario.path;
  j["name"] = scenario.name;
  j["devices"] = scenario.network.device_count;
  j["layout"] = "auto";
  add_layout_json(layout, settings, j);
  j["placement_source"] = layout.placement_source;
  j["cost_s"] = layout.plan.cost.total_s();
  j["datap_cost_s"] = layout.plan.cost.datap_s;
  j["pipeline_cost_s"] = layout.plan.cost.pipeline_s;
  j["stages"] = layout.plan.stages;
  j["plan_hash"] = layout.plan.hash();
  j["planner_seconds"] = layout.seconds;
  j["seed"] = settings.options.placement.seed;
  nlohmann::json candidates = nlohmann::json::array();
  for (const auto& c : layout.candidates) {
    candidates.push_back({{"pp", c.pipeline_stages},
                          {"dp", c.data_parallel},
                          {"micro_batch_sequences", c.micro_batch_sequences},
                          {"screened_iteration_s", std::isfinite(c.iteration_s) ? nlohmann::json(c.iteration_s) : nullptr},
                          {"finalist", c.finalist}});
  }
  j["layout_candidates"] = candidates;
  return j.dump(2) + "\n";
}

std::string render_plan_json(const PlanReport& r) {
  const auto& w = r.scenario->workload;
  const auto& plan = r.result->plan;
  nlohmann::json j;
  j["scenario"] = r.scenario->path;
  j["name"] = r.scenario->name;
  j["devices"] = r.scenario->network.device_count;
  j["pp"] = w.pipeline_stages;
  j["dp"] = w.data_parallel;
  j["workload_origin"] = w.origin;
  j["c_pp_bytes"] = w.c_pp_bytes;
  j["c_pp_gradient_bytes"] = w.c_pp_back_bytes();  // the activations' gradients back
  j["c_dp_bytes"] = w.c_dp_bytes;
  j["cost_s"] = plan.cost.total_s();
  j["datap_cost_s"] = plan.cost.datap_s;
  j["pipeline_cost_s"] = plan.cost.pipeline_s;
  j["pipeline_one_way_s"] = plan.cost.pipeline_s / 2;
  j["boundary_cost_s"] = plan.boundary_s;
  j["lower_bound_s"] = r.lower_bound_s;
  j["optimality_gap"] = gap(plan.cost.total_s(), r.lower_bound_s);
  j["planner_seconds"] = r.result->seconds;
  j["candidates"] = r.result->evaluations;
  j["seed"] = r.options->seed;
  j["local_search"] = plan::to_string(r.options->local_search);
  j["paper_exact"] = r.options->paper_bugs;
  j["stages"] = plan.stages;
  j["tp"] = plan.tensor_parallel;         // the DT-FM plan: always 1
  j["tensor_groups"] = plan.tensor_groups;
  j["plan_hash"] = plan.hash();
  j["layout"] = "fixed";
  if (r.layout != nullptr) {
    add_layout_json(*r.layout, *r.layout_settings, j);
  } else {
    j["predicted_iteration_s"] = nullptr;
    j["layout_note"] = r.layout_note;
  }
  if (r.baselines.computed) {
    j["baselines"] = {{"rank_order_cost_s", r.baselines.rank_order_cost_s},
                      {"dtfm_rank_order_cost_s", r.baselines.dtfm_rank_order_cost_s},
                      {"random_best_cost_s", r.baselines.random_best_cost_s},
                      {"random_samples", r.baselines.random_samples},
                      {"no_local_search_cost_s", r.baselines.no_local_search_cost_s}};
  }
  return j.dump(2) + "\n";
}

}  // namespace geotrain::cli
