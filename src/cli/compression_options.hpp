// The --compress-* and local-steps options that plan and simulate share.
#pragma once
#include <string>

#include "geotrain/cli/commands.hpp"
#include "geotrain/plan/network.hpp"
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

void add_outer_options(CLI::App* command, OuterOptions& options);
// The local steps the options ask for (off unless --local-steps >= 1);
// InputError naming the flag where they do not fit together.
plan::OuterSync outer_sync(const OuterOptions& options, int group_size);
// InputError naming `scenario_path` where --outer-within-site meets a network without sites.
void check_outer_sites(const plan::OuterSync& outer, const plan::Network& network, const std::string& scenario_path);
// "local steps H = 50, outer wire int8 (group 64), streamed in 5 fragments (one every 10 steps)".
std::string describe_outer(const plan::OuterSync& outer);

}  // namespace geotrain::cli
