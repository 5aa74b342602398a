// Renders a planning result as a table for people or as JSON for tools.
#pragma once
#include <string>
#include <vector>

#include "geotrain/io/scenario.hpp"
#include "geotrain/plan/layout_search.hpp"
#include "geotrain/plan/search.hpp"
#include "text_format.hpp"

namespace geotrain::cli {

struct PlanBaselines {
  double rank_order_cost_s = 0;        // Megatron/DeepSpeed default placement, literal
  double dtfm_rank_order_cost_s = 0;   // DT-FM runtime's default placement, literal
  double random_best_cost_s = 0;       // best of K random placements, literal
  int random_samples = 0;
  double no_local_search_cost_s = 0;   // the GA without local search, same budget
  bool computed = false;
};

struct LayoutSettings;

struct PlanReport {
  const io::Scenario* scenario;
  const plan::SearchOptions* options;
  const plan::SearchResult* result;
  PlanBaselines baselines;
  double lower_bound_s = 0;
  // The searched placement's predicted iteration and memory (even split);
  // null where its shapes do not fit the model (layout_note says why).
  const plan::Layout* layout = nullptr;
  const LayoutSettings* layout_settings = nullptr;
  std::string layout_note = {};
};

std::string render_plan_table(const PlanReport& report);
std::string render_plan_json(const PlanReport& report);
// --layout auto: the searched layout as a table or JSON.
std::string render_layout_plan_table(const io::Scenario& scenario, const plan::Layout& layout,
                                     const LayoutSettings& settings, const std::string& why_auto);
std::string render_layout_plan_json(const io::Scenario& scenario, const plan::Layout& layout,
                                    const LayoutSettings& settings);

}  // namespace geotrain::cli
