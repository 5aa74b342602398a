#include "compression_options.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>

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
  command->add_option("--topk-fraction", o.topk_fraction, "topk: the share of the values sent (default 0.01)")
      ->check(CLI::Range(1e-9, 1.0));
  command->add_option("--group-size", o.group_size, "int8 / int4: values per fp32 scale (default 64)")
      ->check(CLI::Range(2, 65536));
}

plan::TrafficEncoding traffic_encoding(const CompressionOptions& o) {
  return {encoding_of(o.activations, o), encoding_of(o.activation_gradients, o), encoding_of(o.gradients, o)};
}

std::string describe_traffic(const plan::TrainingShape& m, double message, double gradient) {
  return describe_class("activations", m.wire.activations, m.activation_bytes, message) + ", " +
         describe_class("activation gradients", m.wire.activation_gradients, m.activation_bytes, message) + ", " +
         describe_class("gradients", m.wire.gradients, m.gradient_bytes, gradient);
}

}  // namespace geotrain::cli
