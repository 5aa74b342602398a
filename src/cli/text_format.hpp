// The reports' number and list formatting, shared by plan, simulate and
// their config modes.
#pragma once
#include <string>
#include <vector>

namespace geotrain::cli {

// One number through a printf pattern ("%.4f", "%8.1f%%").
std::string format_number(const char* pattern, double value);
// "4 12 20 28": a stage's devices in replica order, for tables.
std::string device_list(const std::vector<int>& devices);

}  // namespace geotrain::cli
