#include "text_format.hpp"

#include <cstdio>

namespace geotrain::cli {

std::string format_number(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, pattern, value);
  return buffer;
}

std::string device_list(const std::vector<int>& devices) {
  std::string text;
  for (int d : devices) {
    if (!text.empty()) text += ' ';
    text += std::to_string(d);
  }
  return text;
}

std::string describe_dp_scheme(plan::DataParallelScheme asked, const std::vector<plan::DataParallelScheme>& chosen) {
  std::string text = plan::to_string(asked);
  if (asked != plan::DataParallelScheme::automatic || chosen.empty()) return text;
  text += " (by stage:";
  for (plan::DataParallelScheme scheme : chosen) text += " " + plan::to_string(scheme);
  return text + ")";
}

}  // namespace geotrain::cli
