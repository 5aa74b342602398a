// The settings tree as a table: every key with the field it sets, its doc
// string and its section's checks. Internal to io/ (config.cpp reads and
// writes through it; config_reference.cpp documents it).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "geotrain/io/config.hpp"

namespace geotrain::io::config_table {

using Target = std::variant<int*, double*, std::string*, bool*, std::uint64_t*, std::vector<int>*, std::vector<double>*,
                            DeviceRequest*, MatmulPrecision*, ActivationStorage*, LayoutChoice*, Transport*, DataParallelExchange*, WireFormat*,
                            LmHead*, CheckpointForm*, InnerOptimizer*, plan::Schedule*, plan::Placement*>;

// A field's own bounds (Checks::positive or Checks::in_range, on each entry
// of a list), checked before the rest of its section's checks.
struct Bounds {
  enum Kind { none, positive, range } kind = none;
  double low = 0, high = 0;
};

struct Field {
  std::string key;  // "section.name"
  Target target;
  const char* doc;
  bool is_path = false;  // relative values are resolved against the file's folder
  Bounds bounds{};

  Field&& positive() && {
    bounds = {Bounds::positive};
    return std::move(*this);
  }
  Field&& in_range(double low, double high) && {
    bounds = {Bounds::range, low, high};
    return std::move(*this);
  }
};

struct Section {
  const char* name;
  const char* doc;
  std::vector<Field> fields;
};

// Every section of `c`, in the order describe() and the reference list them.
std::vector<Section> sections(Config& c);
std::vector<Field> all_fields(Config& c);

// What the section checks share: each failure names the key's origin.
class Checks {
 public:
  explicit Checks(const Config& config) : config_(config) {}
  [[noreturn]] void fail(const std::string& key, const std::string& what) const;
  void positive(const std::string& key, long long value) const;
  void in_range(const std::string& key, double value, double low, double high) const;

 private:
  const Config& config_;
};

// Each section's own checks (config_sections.cpp), then the rules that tie
// sections together (config_rules.cpp).
void check_sections(const Config& c, const Checks& checks);
void check_cross_section_rules(const Config& c, const Checks& checks);

// The value as a TOML value ("\"int8\"", "[2, 3]", "true").
std::string toml_value(const Target& target);

}  // namespace geotrain::io::config_table
