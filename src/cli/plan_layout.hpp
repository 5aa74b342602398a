// geotrain plan's layout: the settings the simulator and the memory model
// use, the search (--layout auto), and how a layout is shown.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "geotrain/cli/commands.hpp"
#include "geotrain/io/scenario.hpp"
#include "geotrain/plan/layout_search.hpp"

namespace geotrain::cli {

struct LayoutSettings {
  plan::SimulationConfig config;
  plan::LayoutOptions options;
};

// The model (--model or the scenario's), batch, untyped device speed and
// memory, schedule and the rest from the command line.
LayoutSettings layout_settings(const PlanCommandOptions& o, const io::Scenario& scenario);

// Searches; LayoutError becomes an InputError naming the scenario.
plan::Layout search_layout_for(const io::Scenario& scenario, const LayoutSettings& settings);

// "Layout" section of the table: degrees, micro-batches, the stages'
// layers, devices and memory, idle devices, the predicted iteration.
std::string render_layout_section(const plan::Layout& layout, const io::Scenario& scenario, const LayoutSettings& s);
// Why this layout: the screened candidates it beat.
std::string render_layout_reasons(const plan::Layout& layout);
// pp, dp, micro_batch_sequences, micro_batches, layers_per_stage,
// idle_devices, predicted_iteration_s, memory_gib_per_stage, ...
void add_layout_json(const plan::Layout& layout, const LayoutSettings& s, nlohmann::json& j);

}  // namespace geotrain::cli
