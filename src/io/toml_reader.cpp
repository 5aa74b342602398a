#include "toml_reader.hpp"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "geotrain/common/errors.hpp"

namespace geotrain::io {

std::string shortest(double value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

std::string toml_string(const std::string& text) {
  std::string quoted = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      quoted += '\\';
      quoted += c;
    } else if (c == '\n') {
      quoted += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned char>(c));
      quoted += escaped;
    } else {
      quoted += c;
    }
  }
  return quoted + "\"";
}

std::string field_index(const std::string& field, size_t i) { return field + "[" + std::to_string(i) + "]"; }

std::string field_key(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

std::string type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a floating-point number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "nothing";
  }
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

namespace {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string closest_name(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, name.size() / 4) + 1;
  for (const std::string& candidate : candidates) {
    const std::size_t d = edit_distance(name, candidate);
    if (d < best_distance) best = candidate, best_distance = d;
  }
  return best;
}

std::string unknown_key_message(const std::string& key, const std::vector<std::string>& known) {
  const std::string guess = closest_name(key, known);
  if (!guess.empty()) return "unknown key (did you mean '" + guess + "'?)";
  return "unknown key (known: " + join_names(known) + ")";
}

void TomlReader::fail(const std::string& field, const std::string& what, const std::string& hint) const {
  std::string message = path_ + ": " + field + ": " + what;
  if (!hint.empty()) message += " (" + hint + ")";
  throw InputError(message);
}

toml::table TomlReader::parse(std::string_view text) const {
  try {
    return toml::parse(text, path_);
  } catch (const toml::parse_error& error) {
    std::string description(error.description());
    std::replace(description.begin(), description.end(), '\n', ' ');
    const auto& where = error.source().begin;
    fail("line " + std::to_string(where.line) + ", column " + std::to_string(where.column),
         "TOML syntax error: " + description);
  }
}

toml::table TomlReader::parse_file() const {
  std::error_code ignored;
  if (std::filesystem::is_directory(path_, ignored)) throw InputError(path_ + ": cannot open file (it is a directory)");
  std::ifstream in(path_, std::ios::binary);
  if (!in) throw InputError(path_ + ": cannot open file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(path_ + ": cannot read file");
  return parse(text.str());
}

void TomlReader::check_keys(const toml::table& table, const std::string& field,
                            std::initializer_list<std::string_view> allowed) const {
  for (auto&& [key, node] : table) {
    if (std::find(allowed.begin(), allowed.end(), key.str()) != allowed.end()) continue;
    const std::vector<std::string> names(allowed.begin(), allowed.end());
    const std::string guess = closest_name(std::string(key.str()), names);
    fail(field_key(field, key.str()), "unknown key",
         guess.empty() ? "allowed here: " + join_names(names) : "did you mean '" + guess + "'?");
  }
}

const toml::node& TomlReader::required(const toml::table& table, std::string_view key, const std::string& field) const {
  const toml::node* node = table.get(key);
  if (node == nullptr) fail(field, "missing required field");
  return *node;
}

const toml::table* TomlReader::optional_table(const toml::table& parent, std::string_view key,
                                              const std::string& field) const {
  const toml::node* node = parent.get(key);
  if (node == nullptr) return nullptr;
  if (!node->is_table()) fail(field, "must be a table, got " + type_name(*node));
  return node->as_table();
}

const toml::array& TomlReader::array(const toml::node& node, const std::string& field) const {
  if (!node.is_array()) fail(field, "must be an array, got " + type_name(node));
  return *node.as_array();
}

double TomlReader::number(const toml::node& node, const std::string& field) const {
  if (const auto* f = node.as_floating_point()) return f->get();
  if (const auto* i = node.as_integer()) return static_cast<double>(i->get());
  fail(field, "must be a number, got " + type_name(node));
}

int TomlReader::positive_int(const toml::node& node, const std::string& field) const {
  const auto* integer = node.as_integer();
  if (integer == nullptr) fail(field, "must be an integer, got " + type_name(node));
  const std::int64_t value = integer->get();
  if (value < 1) fail(field, "must be an integer >= 1, got " + std::to_string(value));
  if (value > INT_MAX) fail(field, "is too large, got " + std::to_string(value));
  return static_cast<int>(value);
}

std::string TomlReader::string(const toml::node& node, const std::string& field) const {
  const auto* text = node.as_string();
  if (text == nullptr) fail(field, "must be a string, got " + type_name(node));
  return text->get();
}

std::vector<std::string> TomlReader::strings(const toml::node& node, const std::string& field) const {
  std::vector<std::string> out;
  const toml::array& items = array(node, field);
  for (size_t i = 0; i < items.size(); ++i) out.push_back(string(*items.get(i), field_index(field, i)));
  return out;
}

std::optional<std::string> TomlReader::optional_string(const toml::table& table, std::string_view key,
                                                       const std::string& field) const {
  const toml::node* node = table.get(key);
  if (node == nullptr) return std::nullopt;
  return string(*node, field);
}

std::optional<double> TomlReader::optional_number(const toml::table& table, std::string_view key,
                                                  const std::string& field) const {
  const toml::node* node = table.get(key);
  if (node == nullptr) return std::nullopt;
  return number(*node, field);
}

std::optional<int> TomlReader::optional_positive_int(const toml::table& table, std::string_view key,
                                                     const std::string& field) const {
  const toml::node* node = table.get(key);
  if (node == nullptr) return std::nullopt;
  return positive_int(*node, field);
}

}  // namespace geotrain::io
