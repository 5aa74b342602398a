#include "geotrain/io/config.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <toml++/toml.h>

#include "config_fields.hpp"
#include "geotrain/io/checkpoint.hpp"
#include "model_table.hpp"
#include "toml_reader.hpp"

namespace geotrain::io {
using config_table::Field;
namespace {

template <class Choice>
std::vector<Choice> all_values() {
  std::vector<Choice> values;
  for (int i = 0; to_string(static_cast<Choice>(i)) != "?"; ++i) values.push_back(static_cast<Choice>(i));
  return values;
}

template <class Choice>
bool parse_value(const std::string& text, Choice* out) {
  for (Choice c : all_values<Choice>()) {
    if (to_string(c) == text) return *out = c, true;
  }
  return false;
}

template <class Choice>
std::string choice_names() {
  std::string names;
  for (Choice c : all_values<Choice>()) names += (names.empty() ? "" : ", ") + to_string(c);
  return names;
}

[[noreturn]] void fail(const std::string& where, const std::string& key, const std::string& what) {
  throw InputError(where + ": " + key + ": " + what);
}

std::string unknown_key(Config& c, const std::string& key) {
  std::vector<std::string> known;
  for (const Field& f : config_table::all_fields(c)) known.emplace_back(f.key);
  return unknown_key_message(key, known);
}

Field* find(std::vector<Field>& all, const std::string& key) {
  for (Field& f : all) {
    if (key == f.key) return &f;
  }
  return nullptr;
}

// Assigns a TOML value; `where` names the file for messages.
void assign(const Field& f, const toml::node& node, const std::string& where, const std::string& base_dir) {
  const std::string key = f.key;
  std::visit(
      [&](auto* target) {
        using T = std::remove_pointer_t<decltype(target)>;
        if constexpr (std::is_same_v<T, std::string>) {
          auto v = node.value<std::string>();
          if (!v) fail(where, key, "must be a string");
          *target = *v;
          if (f.is_path && !target->empty() && std::filesystem::path(*target).is_relative()) {
            *target = (std::filesystem::path(base_dir) / *target).lexically_normal().string();
          }
        } else if constexpr (std::is_same_v<T, std::vector<int>>) {
          const toml::array* list = node.as_array();
          if (!list) fail(where, key, "must be a list of integers like [2, 3]");
          target->clear();
          for (const toml::node& item : *list) {
            if (!item.is_integer()) fail(where, key, "must be a list of integers like [2, 3]");
            const std::int64_t v = *item.value<std::int64_t>();
            if (v < 1 || v > 1000000) fail(where, key, "entries must be in [1, 1000000], got " + std::to_string(v));
            target->push_back(static_cast<int>(v));
          }
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          const toml::array* list = node.as_array();
          if (!list) fail(where, key, "must be a list of numbers like [1, 2.5]");
          target->clear();
          for (const toml::node& item : *list) {
            const std::optional<double> v = item.value<double>();
            if (!v) fail(where, key, "must be a list of numbers like [1, 2.5]");
            target->push_back(*v);
          }
        } else if constexpr (std::is_enum_v<T>) {
          auto v = node.value<std::string>();
          if (!v || !parse_value(*v, target)) {
            fail(where, key, "must be one of " + choice_names<T>() + ", got " + (v ? "'" + *v + "'" : type_name(node)));
          }
        } else if constexpr (std::is_same_v<T, bool>) {
          auto v = node.value<bool>();
          if (!v) fail(where, key, "must be true or false");
          *target = *v;
        } else if constexpr (std::is_same_v<T, double>) {
          auto v = node.value<double>();
          if (!v) fail(where, key, "must be a number");
          *target = *v;
        } else {
          if (!node.is_integer()) fail(where, key, "must be an integer");
          const std::int64_t v = *node.value<std::int64_t>();
          if (v < 0) fail(where, key, "must be >= 0, got " + std::to_string(v));
          if constexpr (std::is_same_v<T, int>) {
            if (v > 2147483647) fail(where, key, "too large");
          }
          *target = static_cast<T>(v);
        }
      },
      f.target);
}

void apply_table(Config& c, const toml::table& root, const std::string& where, const std::string& base_dir) {
  auto all = config_table::all_fields(c);
  for (const auto& [section, node] : root) {
    const toml::table* table = node.as_table();
    if (!table) fail(where, std::string(section.str()), "expected a table like [" + std::string(section.str()) + "]");
    for (const auto& [name, value] : *table) {
      const std::string key = std::string(section.str()) + "." + std::string(name.str());
      Field* f = find(all, key);
      if (!f) fail(where, key, unknown_key(c, key));
      assign(*f, value, where, base_dir);
    }
  }
}

void apply_override(Config& c, const std::string& text) {
  std::string body = text.rfind("--", 0) == 0 ? text.substr(2) : text;
  const auto eq = body.find('=');
  if (eq == std::string::npos) fail("command line", body, "expected --section.key=value");
  const std::string key = body.substr(0, eq), value = body.substr(eq + 1);
  // One override sets one key: a line break would start a second TOML line.
  if (body.find_first_of("\r\n") != std::string::npos) fail("command line", key, "must not contain a line break");
  auto all = config_table::all_fields(c);
  if (!find(all, key)) fail("command line", key, unknown_key(c, key));
  // Parse the value as TOML so that types and messages match the file's.
  toml::table parsed;
  const auto dot = key.find('.');
  const std::string section = key.substr(0, dot), name = key.substr(dot + 1);
  try {
    parsed = toml::parse(name + " = " + value);
  } catch (const toml::parse_error&) {
    try {
      parsed = toml::parse(name + " = \"" + value + "\"");  // bare strings
    } catch (const toml::parse_error&) {
      fail("command line", key, "cannot read value '" + value + "'");
    }
  }
  toml::table root;
  root.insert(section, std::move(parsed));
  apply_table(c, root, "command line", std::filesystem::current_path().string());
  c.command_line_keys.push_back(key);
}

}  // namespace

namespace config_table {

std::vector<Field> all_fields(Config& c) {
  std::vector<Field> all;
  for (Section& s : sections(c)) all.insert(all.end(), s.fields.begin(), s.fields.end());
  return all;
}

void Checks::fail(const std::string& key, const std::string& what) const { throw config_.error(key, what); }

void Checks::positive(const std::string& key, long long value) const {
  if (value <= 0) fail(key, "must be > 0, got " + std::to_string(value));
}

void Checks::in_range(const std::string& key, double value, double low, double high) const {
  if (!std::isfinite(value) || value < low || value > high) {
    fail(key, "must be in [" + std::to_string(low) + ", " + std::to_string(high) + "], got " + std::to_string(value));
  }
}

std::string toml_value(const Target& target) {
  std::ostringstream out;
  std::visit(
      [&](auto* value) {
        using T = std::remove_pointer_t<decltype(value)>;
        if constexpr (std::is_same_v<T, std::string>) out << toml_string(*value);
        else if constexpr (std::is_same_v<T, bool>) out << (*value ? "true" : "false");
        else if constexpr (std::is_enum_v<T>) out << '"' << to_string(*value) << '"';
        else if constexpr (std::is_same_v<T, std::vector<int>> || std::is_same_v<T, std::vector<double>>) {
          out << '[';
          for (std::size_t i = 0; i < value->size(); ++i) out << (i ? ", " : "") << (*value)[i];
          out << ']';
        } else out << *value;
      },
      target);
  return out.str();
}

}  // namespace config_table

namespace {

void check(const Config& c) {
  const config_table::Checks checks(c);
  config_table::check_sections(c, checks);
  config_table::check_cross_section_rules(c, checks);
}

}  // namespace

Config default_config(const std::vector<std::string>& overrides) {
  Config c;
  for (const auto& o : overrides) apply_override(c, o);
  check(c);
  return c;
}

Config read_config(const std::string& path, const std::vector<std::string>& overrides) {
  return path.empty() ? default_config(overrides) : load_config(path, overrides);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  Config c;
  c.source = path;
  const std::string base_dir = std::filesystem::path(path).parent_path().string();
  apply_table(c, TomlReader(path).parse_file(), path, base_dir);
  for (const auto& o : overrides) apply_override(c, o);
  check(c);
  return c;
}

std::string Config::origin_of(const std::string& key) const {
  for (const std::string& k : command_line_keys) {
    if (k == key) return "command line";
  }
  return source.empty() ? "command line" : source;
}

InputError Config::error(const std::string& key, const std::string& what) const {
  return InputError(origin_of(key) + ": " + key + ": " + what);
}

ModelShape model_of_checkpoint(const Config& c, const Checkpoint& checkpoint, const std::string& path,
                               const std::string& command) {
  const ModelShape& have = checkpoint.model;
  const std::pair<const char*, std::pair<int, int>> fields[] = {
      {"layers", {c.model.layers, have.layers}},        {"hidden", {c.model.hidden, have.hidden}},
      {"heads", {c.model.heads, have.heads}},           {"vocabulary", {c.model.vocabulary, have.vocabulary}},
      {"sequence_length", {c.model.sequence_length, have.sequence_length}}};
  for (const auto& [name, values] : fields) {
    if (values.first != 0 && values.first != values.second) {
      throw c.error(std::string("model.") + name, std::to_string(values.first) + " contradicts the checkpoint's " +
                                                      std::to_string(values.second) + " (" + path + ": attribute model_" +
                                                      name + "); leave it out: " + command +
                                                      " takes the model from the checkpoint");
    }
  }
  if (c.model.lm_head != LmHead::model_file && (c.model.lm_head == LmHead::tied) != have.tied_head) {
    throw c.error("model.lm_head", std::string(have.tied_head ? "untied" : "tied") + " contradicts the checkpoint's " +
                                       (have.tied_head ? "tied" : "untied") + " head (" + path +
                                       ": attribute model_lm_head); leave it out: " + command +
                                       " takes the model from the checkpoint");
  }
  return have;
}

ModelFile load_model(const Config& config) {
  if (!config.checkpoint.init_from.empty()) {
    const std::string& path = config.checkpoint.init_from;
    ModelFile file;
    file.path = path;
    file.model = model_of_checkpoint(config, read_checkpoint_header(path), path, "checkpoint.init_from");
    return file;
  }
  const ModelSettings& m = config.model;
  ModelFile file = load_model_file(m.file);
  const std::pair<int, int*> overrides[] = {{m.layers, &file.model.layers},
                                            {m.hidden, &file.model.hidden},
                                            {m.heads, &file.model.heads},
                                            {m.vocabulary, &file.model.vocabulary},
                                            {m.sequence_length, &file.model.sequence_length}};
  for (const auto& [value, target] : overrides) {
    if (value > 0) *target = value;
  }
  if (m.lm_head != LmHead::model_file) file.model.tied_head = m.lm_head == LmHead::tied;
  // The file itself was checked; only an override can break hidden % heads.
  if (m.heads > 0 || m.hidden > 0) {
    check_model_shape(TomlReader(config.origin_of(m.heads > 0 ? "model.heads" : "model.hidden")), "model", file.model);
  }
  return file;
}

std::string describe(const Config& config) {
  Config copy = config;
  std::ostringstream out;
  for (const Field& f : config_table::all_fields(copy)) out << f.key << " = " << config_table::toml_value(f.target) << "\n";
  return out.str();
}

}  // namespace geotrain::io
