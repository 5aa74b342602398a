#include "compression_options.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>

#include "geotrain/common/errors.hpp"

namespace geotrain::cli {
namespace {

std::optional<WireEncoding> encoding_of(const std::string& format, const CompressionOptions& o) {
  if (format.empty()) return std::nullopt;
  WireEncoding e;
  parse_name_in(kWireFormatNames, format, &e.format);
  e.group_size = o.group_size;
  e.topk_fraction = o.topk_fraction;
  return e;
}

// One class: its encoding and bytes per value on a message of `values` values.
std::string describe_class(const char* name, const std::optional<WireEncoding>& e, int model_bytes, double values) {
  char line[160];
  const double per_value = plan::traffic_bytes(e, values, model_bytes) / values;
  const std::string format = e ? to_string(*e) : "model default";
  std::snprintf(line, sizeof line, "%s %s %.5g B/value", name, format.c_str(), per_value);
  return line;
}

}  // namespace

void add_compression_options(CLI::App* command, CompressionOptions& o) {
  command->add_option("--compress-activations", o.activations,
                      "activations on pipeline links: fp32, int8, int4 (default: the model's 2 bytes, fp16)")
      ->check(CLI::IsMember({"fp32", "int8", "int4"}));
  command->add_option("--compress-activation-gradients", o.activation_gradients,
                      "activation gradients back over pipeline links: fp32, int8, int4 (default: 2 bytes, fp16)")
      ->check(CLI::IsMember({"fp32", "int8", "int4"}));
  command->add_option("--compress-gradients", o.gradients,
                      "data-parallel gradients: fp32, int8, int4, topk (default: fp32)")
      ->check(CLI::IsMember({"fp32", "int8", "int4", "topk"}));
  command->add_option("--compress-tied-embedding", o.tied_embedding,
                      "the tied embedding's gradient summed every step between a pipeline's first and last stage: "
                      "fp32, int8, int4, topk (compression.tied_embedding; default fp32)")
      ->check(CLI::IsMember({"fp32", "int8", "int4", "topk"}));
  command->add_option("--topk-fraction", o.topk_fraction, "topk: the share of the values sent (default 0.01)")
      ->check(CLI::Range(1e-9, 1.0));
  command->add_option("--group-size", o.group_size, "int8 / int4: values per fp32 scale (default 64)")
      ->check(CLI::Range(2, 65536));
}

void add_outer_options(CLI::App* command, OuterOptions& o) {
  command->add_option("--local-steps", o.local_steps,
                      "local steps H (outer.local_steps): each replica takes H steps alone, then the replicas sum "
                      "their pseudo-gradients; 0 = a gradient exchange every step (default)")
      ->check(CLI::Range(0, 1 << 20));
  command->add_option("--outer-wire", o.wire, "local steps: the pseudo-gradient on the wire, fp32, int8, int4 "
                                              "(the runtime's compression.gradients; default fp32)")
      ->check(CLI::IsMember({"fp32", "int8", "int4"}));
  command->add_option("--outer-fragments", o.fragments,
                      "local steps: stream each stage's sync in F <= H fragments, one every H/F steps, each "
                      "overlapping the inner steps until the next (outer.fragments; 1 = the whole stage at once, the default)")
      ->check(CLI::Range(0, 1 << 20));
  command->add_flag("--outer-within-site", o.within_site,
                    "local steps: the replicas of one site (the scenario's [sites]) still sum their fp32 gradient "
                    "every step; only the sites take local steps (outer.sync_within_site)");
}

plan::OuterSync outer_sync(const OuterOptions& o, int group_size) {
  plan::OuterSync outer;
  const bool local = o.local_steps >= 1;
  if (!local && !o.wire.empty()) throw InputError("command line: --outer-wire: needs --local-steps >= 1");
  if (!local && o.fragments > 1) throw InputError("command line: --outer-fragments: needs --local-steps >= 1");
  if (!local && o.within_site) throw InputError("command line: --outer-within-site: needs --local-steps >= 1");
  if (!local) return outer;
  if (o.fragments > o.local_steps) {
    throw InputError("command line: --outer-fragments: " + std::to_string(o.fragments) +
                     " fragments are more than --local-steps " + std::to_string(o.local_steps) +
                     " (each is synchronised once every H steps, one step apart at least)");
  }
  outer.local_steps = o.local_steps;
  outer.fragments = o.fragments;
  outer.within_site = o.within_site;
  if (!o.wire.empty()) {
    WireEncoding e;
    parse_name_in(kWireFormatNames, o.wire, &e.format);
    e.group_size = group_size;
    outer.wire = e;
  }
  return outer;
}

void check_outer_sites(const plan::OuterSync& outer, const plan::Network& network, const std::string& scenario_path) {
  if (outer.within_site && network.site_of_device.empty()) {
    throw InputError(scenario_path + ": --outer-within-site: the network names no sites (a scenario with [sites], "
                                     "or network.sites)");
  }
}

std::string describe_outer(const plan::OuterSync& outer) {
  if (!outer.enabled()) return "off (a gradient exchange every step)";
  std::string text = "local steps H = " + std::to_string(outer.local_steps) + ", outer wire " +
                     (outer.wire ? to_string(*outer.wire) : std::string("fp32"));
  if (outer.streamed()) {
    text += ", streamed in " + std::to_string(outer.fragments) + " fragments (one every " +
            std::to_string(outer.local_steps / outer.fragments) + " steps)";
  } else {
    text += ", the whole stage every " + std::to_string(outer.local_steps) + " steps";
  }
  if (outer.within_site) text += "; a site's replicas sum every step";
  return text;
}

plan::TrafficEncoding traffic_encoding(const CompressionOptions& o) {
  return {encoding_of(o.activations, o), encoding_of(o.activation_gradients, o), encoding_of(o.gradients, o),
          encoding_of(o.tied_embedding, o)};
}

std::string describe_traffic(const plan::TrainingShape& m, double message, double gradient) {
  return describe_class("activations", m.wire.activations, m.activation_bytes, message) + ", " +
         describe_class("activation gradients", m.wire.activation_gradients, m.activation_bytes, message) + ", " +
         describe_class("gradients", m.wire.gradients, m.gradient_bytes, gradient);
}

}  // namespace geotrain::cli
