// The reports' number and list formatting, shared by plan, simulate and
// their config modes.
#pragma once
#include <string>
#include <vector>

#include "geotrain/plan/simulator.hpp"

namespace geotrain::cli {

// One number through a printf pattern ("%.4f", "%8.1f%%").
std::string format_number(const char* pattern, double value);
// "4 12 20 28": a stage's devices in replica order, for tables.
std::string device_list(const std::vector<int>& devices);
// The data-parallel scheme as asked, and under auto what each stage group
// chose: "auto (by stage: hierarchical direct)".
std::string describe_dp_scheme(plan::DataParallelScheme asked, const std::vector<plan::DataParallelScheme>& chosen);
// The same as a JSON list of names.
std::vector<std::string> scheme_names(const std::vector<plan::DataParallelScheme>& schemes);

}  // namespace geotrain::cli
