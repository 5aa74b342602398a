// The words the command line and the reports use for an enum's values, as
// one table per enum: to_string and parse_* read the same table, so a name
// cannot be spelt one way when printed and another when parsed.
#pragma once
#include <cstddef>
#include <string>
#include <utility>

namespace geotrain::plan {

template <class Enum>
using EnumName = std::pair<Enum, const char*>;

template <class Enum, std::size_t N>
std::string name_in(const EnumName<Enum> (&names)[N], Enum value) {
  for (const auto& [candidate, name] : names) {
    if (candidate == value) return name;
  }
  return "?";
}

template <class Enum, std::size_t N>
bool parse_name_in(const EnumName<Enum> (&names)[N], const std::string& text, Enum* value) {
  for (const auto& [candidate, name] : names) {
    if (text == name) {
      *value = candidate;
      return true;
    }
  }
  return false;
}

}  // namespace geotrain::plan
