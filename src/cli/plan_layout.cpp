#include "plan_layout.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "geotrain/common/errors.hpp"
#include "geotrain/io/model_file.hpp"
#include "compression_options.hpp"
#include "text_format.hpp"

namespace geotrain::cli {
namespace {

std::string gib(double bytes) { return std::isfinite(bytes) ? format_number("%.2f", bytes / plan::kBytesPerGib) : "-"; }

// "A100-40 x4, V100-16 x4": the types of a stage's devices.
std::string type_summary(const plan::Network& net, const std::vector<int>& devices) {
  if (!net.typed()) return "-";
  std::vector<std::pair<std::string, int>> counts;
  for (int d : devices) {
    const std::string& name = net.device_type(d)->name;
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == name; });
    if (it == counts.end()) counts.emplace_back(name, 1); else ++it->second;
  }
  std::string text;
  for (const auto& [name, count] : counts) text += (text.empty() ? "" : ", ") + name + " x" + std::to_string(count);
  return text;
}

}  // namespace

LayoutSettings layout_settings(const PlanCommandOptions& o, const io::Scenario& scenario) {
  LayoutSettings s;
  plan::SimulationConfig& c = s.config;
  c.model = scenario.workload.model;
  c.global_batch_sequences = static_cast<int>(std::lround(c.model.tokens_per_step / c.model.sequence_length));
  io::DeviceSpeed device;
  if (!o.model.empty()) {
    const io::ModelFile file = io::load_model_file(o.model);
    c.model = io::training_shape(file);
    c.global_batch_sequences = file.batch.value_or(io::BatchShape{}).global_batch_sequences;
    if (file.batch) c.micro_batch_sequences = file.batch->micro_batch_sequences;
    device = file.device.value_or(io::DeviceSpeed{});
  }
  c.model.wire = traffic_encoding(o.compression);
  c.model.outer = outer_sync(o.outer, o.compression.group_size);
  check_outer_sites(c.model.outer, scenario.network, o.scenario);
  if (o.batch > 0) c.global_batch_sequences = o.batch;
  c.model.tokens_per_step = static_cast<double>(c.global_batch_sequences) * c.model.sequence_length;
  c.peak_tflops = o.peak_tflops > 0 ? o.peak_tflops : device.peak_tflops;
  c.efficiency = o.efficiency > 0 ? o.efficiency : device.efficiency;
  plan::parse_schedule(o.schedule, &c.schedule);
  plan::parse_dp_scheme(o.dp_scheme, &c.dp_scheme);
  c.recompute = o.recompute == "on";
  c.lm_head = o.lm_head == "on";
  c.tied_head = c.model.tied_head;
  c.gradient_bucket_mb = o.gradient_bucket_mb;
  c.micro_batches_per_flush = o.pipeline_micro_batches;  // 0: one flush (fixed mode)
  if (o.micro_batch > 0) c.micro_batch_sequences = o.micro_batch;

  plan::LayoutOptions& l = s.options;
  if (o.pp > 0) l.pipeline_stages = o.pp;
  if (o.dp > 0) l.data_parallel = o.dp;
  if (o.tp > 0) l.tensor_parallel = o.tp;
  l.tensor_efficiency = o.tp_efficiency;
  if (o.micro_batch > 0) l.micro_batch_sequences = o.micro_batch;
  if (o.pipeline_micro_batches > 0) l.micro_batches_per_flush = o.pipeline_micro_batches;
  l.memory.recompute = c.recompute;
  parse_name_in(kActivationStorageNames, o.activation_storage, &l.memory.activation_storage);  // checked by the CLI
  l.memory.reserved_bytes = o.memory_reserve_gib * plan::kBytesPerGib;
  l.untyped_memory_bytes = o.device_memory_gib * plan::kBytesPerGib;
  l.placement.seed = o.seed;
  l.placement.candidates = o.candidates_given ? o.candidates : 1000;
  l.placement.threads = o.threads;
  return s;
}

plan::Layout search_layout_for(const io::Scenario& scenario, const LayoutSettings& s) {
  try {
    return plan::search_layout(scenario.network, s.config, s.options);
  } catch (const plan::LayoutError& e) {
    throw InputError(scenario.path + ": " + e.what());
  }
}

std::string render_layout_section(const plan::Layout& l, const io::Scenario& scenario, const LayoutSettings& s) {
  const auto& net = scenario.network;
  const auto& c = l.config;
  const auto& res = l.simulation;
  const int t = l.plan.tensor_parallel;
  const int used = l.plan.pipeline_stages * l.plan.data_parallel * t;
  // A stage's devices: its units' ranks ([a b] per unit with tensor parallelism).
  auto stage_devices = [&](int st) {
    std::vector<int> devices;
    for (int unit : l.plan.stages[st]) {
      for (int d : l.plan.ranks_of_unit(unit)) devices.push_back(d);
    }
    return devices;
  };
  auto stage_text = [&](int st) {
    if (t == 1) return device_list(l.plan.stages[st]);
    std::string text;
    for (int unit : l.plan.stages[st]) text += (text.empty() ? "[" : " [") + device_list(l.plan.ranks_of_unit(unit)) + "]";
    return text;
  };
  std::ostringstream out;
  out << "Layout: " << (t > 1 ? "tp " + std::to_string(t) + " x " : std::string()) << "pp " << l.plan.pipeline_stages
      << " x dp " << l.plan.data_parallel << " = " << used << " of "
      << net.device_count << " devices" << (l.idle_devices.empty() ? "" : ", idle: " + device_list(l.idle_devices))
      << "\n  micro-batch " << l.micro_batch_sequences << " sequence" << (l.micro_batch_sequences > 1 ? "s" : "")
      << ", " << l.micro_batches << " micro-batches per replica in flushes of " << l.micro_batches_per_flush << " ("
      << plan::to_string(c.schedule) << "), batch " << c.global_batch_sequences << "; " << c.model.name << ", "
      << c.model.layers << " layers; DP " << describe_dp_scheme(c.dp_scheme, res.stage_dp_scheme)
      << (c.gradient_bucket_mb > 0 ? " in " + format_number("%g", c.gradient_bucket_mb) + " MiB buckets" : "") << ", recomputation "
      << (c.recompute ? "on" : "off") << ", LM head " << (c.lm_head ? "on" : "off") << "\n"
      << "  shared links: " << plan::describe_shared_links(net) << "\n"
      << (c.model.outer.enabled() ? "  outer: " + describe_outer(c.model.outer) + "\n" : "")
      << "  memory per device: parameters, gradients, AdamW (" << format_number("%g", s.options.memory.state_bytes_per_parameter)
      << " B/parameter), activations (" << to_string(s.options.memory.activation_storage) << "), workspace, reserve "
      << gib(s.options.memory.reserved_bytes) << " GiB\n\n"
      << "  stage  layers  memory GiB (need / have)  device types           devices by replica\n";
  for (int st = 0; st < l.plan.pipeline_stages; ++st) {
    char line[512];
    std::snprintf(line, sizeof line, "  %5d  %6d  %10s / %-12s  %-22s  %s\n", st, l.layers_per_stage[st],
                  gib(l.memory_bytes_per_stage[st]).c_str(), gib(l.capacity_bytes_per_stage[st]).c_str(),
                  type_summary(net, stage_devices(st)).c_str(), stage_text(st).c_str());
    out << line;
  }
  out << "\nPredicted iteration: " << format_number("%.4f", res.iteration_s) << " s (" << format_number("%.0f", res.tokens_per_s)
      << " tokens/s; pipeline phase " << format_number("%.4f", res.pipeline_phase_s) << " s, DP exchange "
      << format_number("%.4f", res.datap_comm_s) << " s, utilisation " << format_number("%.1f%%", 100 * res.utilisation_mean) << ")\n";
  if (t > 1) {
    out << "Tensor parallel " << t << ": stages list units [devices of one node, in tensor-parallel rank order]; "
        << l.plan.tensor_groups.size() << " units formed\n";
  }
  for (const auto& [degree, seconds] : l.tensor_parallel_tried) {
    out << "  tp " << degree << ": " << (std::isfinite(seconds) ? format_number("%.4f s", seconds) : std::string("no fit")) << "\n";
  }
  if (!l.fits()) out << "WARNING: a stage needs more memory than its devices have (see the table)\n";
  return out.str();
}

std::string render_layout_reasons(const plan::Layout& l) {
  std::ostringstream out;
  int fitting = 0;
  for (const auto& c : l.candidates) fitting += std::isfinite(c.iteration_s) ? 1 : 0;
  out << "Why: the smallest simulated iteration. Screened " << l.candidates.size()
      << " (pp, dp, micro-batch) with structured placements and a speed-balanced split (" << fitting
      << " fit in memory); the best pp x dp got the DT-FM placement search (with mixed devices also one inside each type), the stage order and "
         "the layer split refined by simulation; winner's placement: "
      << l.placement_source << ".\n  screened best:";
  int shown = 0;
  for (const auto& c : l.candidates) {
    if (!std::isfinite(c.iteration_s) || shown++ >= 5) continue;
    out << "  " << c.pipeline_stages << "x" << c.data_parallel << " b" << c.micro_batch_sequences << " "
        << format_number("%.3f s", c.iteration_s);
  }
  out << "\n";
  return out.str();
}

void add_layout_json(const plan::Layout& l, const LayoutSettings& s, nlohmann::json& j) {
  j["pp"] = l.plan.pipeline_stages;
  j["dp"] = l.plan.data_parallel;
  j["tp"] = l.plan.tensor_parallel;
  j["tensor_groups"] = l.plan.tensor_groups;  // t > 1: stages hold unit ids, unit u = tensor_groups[u]
  nlohmann::json tried = nlohmann::json::array();
  for (const auto& [degree, seconds] : l.tensor_parallel_tried) {
    tried.push_back({{"tp", degree}, {"iteration_s", std::isfinite(seconds) ? nlohmann::json(seconds) : nullptr}});
  }
  j["tensor_parallel_tried"] = tried;
  j["micro_batch_sequences"] = l.micro_batch_sequences;
  j["micro_batches"] = l.micro_batches;
  j["micro_batches_per_flush"] = l.micro_batches_per_flush;
  j["global_batch_sequences"] = l.config.global_batch_sequences;
  j["layers_per_stage"] = l.layers_per_stage;
  j["idle_devices"] = l.idle_devices;
  j["predicted_iteration_s"] = l.simulation.iteration_s;
  j["predicted_tokens_per_s"] = l.simulation.tokens_per_s;
  std::vector<double> need, have;
  for (double b : l.memory_bytes_per_stage) need.push_back(b / plan::kBytesPerGib);
  j["memory_gib_per_stage"] = need;
  nlohmann::json capacity = nlohmann::json::array();
  for (double b : l.capacity_bytes_per_stage) {
    capacity.push_back(std::isfinite(b) ? nlohmann::json(b / plan::kBytesPerGib) : nlohmann::json(nullptr));
  }
  j["memory_capacity_gib_per_stage"] = capacity;
  j["memory_fits"] = l.fits();
  j["schedule"] = plan::to_string(l.config.schedule);
  j["dp_scheme"] = plan::to_string(l.config.dp_scheme);
  j["stage_dp_scheme"] = scheme_names(l.simulation.stage_dp_scheme);
  j["recompute"] = l.config.recompute;
  j["lm_head"] = l.config.lm_head;
  j["memory_reserve_gib"] = s.options.memory.reserved_bytes / plan::kBytesPerGib;
  j["activation_storage"] = to_string(s.options.memory.activation_storage);
}

}  // namespace geotrain::cli
