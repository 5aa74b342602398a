// The --compress-* options that plan and simulate share.
#pragma once
#include <string>

#include "geotrain/cli/commands.hpp"
#include "geotrain/plan/workload.hpp"

namespace CLI {
class App;
}

namespace geotrain::cli {

void add_compression_options(CLI::App* command, CompressionOptions& options);
// The encodings the options name; classes left unset stay unset (the model's bytes).
plan::TrafficEncoding traffic_encoding(const CompressionOptions& options);
// "activations int8 (group 64) 1.062 B/value, ..." for a report: messages
// of `message_values` values, gradients of `gradient_values`.
std::string describe_traffic(const plan::TrainingShape& model, double message_values, double gradient_values);

}  // namespace geotrain::cli
