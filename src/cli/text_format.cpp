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
  const std::string text = plan::to_string(asked);
  if (asked != plan::DataParallelScheme::automatic || chosen.empty()) return text;
  return text + " (by stage: " + plan::to_string(chosen) + ")";
}

std::vector<std::string> scheme_names(const std::vector<plan::DataParallelScheme>& schemes) {
  std::vector<std::string> names;
  for (plan::DataParallelScheme scheme : schemes) names.push_back(plan::to_string(scheme));
  return names;
}

}  // namespace geotrain::cli
