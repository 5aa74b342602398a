// The one reading layer under every TOML format geotrain reads (run config,
// scenario, model file): typed getters that take the dotted field they read,
// so that every failure is one InputError line
// "<file>: <field>: <what is wrong> (<hint>)".
#pragma once
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <toml++/toml.h>
#include <vector>

namespace geotrain::io {

// Shortest text that reads back as exactly `value` ("34", "0.79", "nan").
std::string shortest(double value);
// A TOML basic string: quoted, with every control character escaped, so that
// a value (a sample prompt with a line break) stays on its key's line.
std::string toml_string(const std::string& text);
std::string field_index(const std::string& field, size_t i);
std::string field_key(const std::string& parent, std::string_view key);
std::string type_name(const toml::node& node);
std::string join_names(const std::vector<std::string>& names);

// The candidate closest to a misspelt `name` by edit distance, or "" when
// none is close enough to be a plausible typo.
std::string closest_name(const std::string& name, const std::vector<std::string>& candidates);
// "unknown key (did you mean 'train.steps'?)" or "unknown key (known: a, b, c)".
std::string unknown_key_message(const std::string& key, const std::vector<std::string>& known);

class TomlReader {
 public:
  // `path` names the source in messages: a file, or "command line".
  explicit TomlReader(std::string path) : path_(std::move(path)) {}
  const std::string& path() const { return path_; }

  [[noreturn]] void fail(const std::string& field, const std::string& what, const std::string& hint = {}) const;

  // Parses TOML text; a syntax error names its line and column.
  toml::table parse(std::string_view text) const;
  // Reads and parses the file at path(); "cannot open file" when it is missing.
  toml::table parse_file() const;

  // Unknown keys are fatal: a misspelt optional key would otherwise be
  // silently ignored and a default quietly used.
  void check_keys(const toml::table& table, const std::string& field,
                  std::initializer_list<std::string_view> allowed) const;

  const toml::node& required(const toml::table& table, std::string_view key, const std::string& field) const;
  const toml::table* optional_table(const toml::table& parent, std::string_view key, const std::string& field) const;
  const toml::array& array(const toml::node& node, const std::string& field) const;
  // Integers count as numbers: "latency_ms = [[0, 5], [5, 0]]" is fine.
  double number(const toml::node& node, const std::string& field) const;
  int positive_int(const toml::node& node, const std::string& field) const;
  std::string string(const toml::node& node, const std::string& field) const;
  std::vector<std::string> strings(const toml::node& node, const std::string& field) const;

  std::optional<std::string> optional_string(const toml::table& table, std::string_view key,
                                             const std::string& field) const;
  std::optional<double> optional_number(const toml::table& table, std::string_view key, const std::string& field) const;
  std::optional<int> optional_positive_int(const toml::table& table, std::string_view key,
                                           const std::string& field) const;

 private:
  std::string path_;
};

}  // namespace geotrain::io
