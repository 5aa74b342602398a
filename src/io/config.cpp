#include "geotrain/io/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <sstream>
#include <toml++/toml.h>
#include <variant>

#include "geotrain/common/errors.hpp"
#include "model_table.hpp"
#include "toml_reader.hpp"

namespace geotrain::io {
namespace {

using Target = std::variant<int*, double*, std::string*, bool*, std::uint64_t*, std::vector<int>*, std::vector<double>*,
                            DeviceRequest*, MatmulPrecision*, ActivationStorage*, LayoutChoice*, Transport*, WireFormat*, LmHead*, CheckpointForm*, InnerOptimizer*, plan::Schedule*,
                            plan::Placement*>;

// Every value of a closed choice, in declaration order: the choices are
// enums numbered from 0 whose to_string says "?" past the last value.
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

struct Field {
  const char* key;
  Target target;
  bool is_path = false;
};

std::vector<Field> fields(Config& c) {
  return {
      {"model.file", &c.model_file, true},
      {"model.layers", &c.model_layers},
      {"model.hidden", &c.model_hidden},
      {"model.heads", &c.model_heads},
      {"model.vocabulary", &c.model_vocabulary},
      {"model.sequence_length", &c.model_sequence_length},
      {"model.lm_head", &c.model_lm_head},
      {"device.kind", &c.device},
      {"device.matmul_precision", &c.matmul_precision},
      {"device.activation_storage", &c.activation_storage},
      {"device.peak_tflops", &c.device_peak_tflops},
      {"data.train", &c.data_train, true},
      {"data.validation", &c.data_validation, true},
      {"train.steps", &c.train_steps},
      {"train.micro_batch_sequences", &c.micro_batch_sequences},
      {"train.gradient_accumulation", &c.gradient_accumulation},
      {"train.seed", &c.seed},
      {"train.eval_every_steps", &c.eval_every_steps},
      {"train.eval_batches", &c.eval_batches},
      {"train.log_every_steps", &c.log_every_steps},
      {"train.quiet", &c.quiet},
      {"train.log_json", &c.log_json},
      {"train.metrics_file", &c.metrics_file},
      {"train.sample_every_steps", &c.sample_every_steps},
      {"train.sample_prompt", &c.sample_prompt},
      {"train.sample_tokens", &c.sample_tokens},
      {"train.sample_temperature", &c.sample_temperature},
      {"pipeline.stages", &c.pipeline_stages},
      {"pipeline.schedule", &c.pipeline_schedule},
      {"pipeline.layers_per_stage", &c.layers_per_stage},
      {"pipeline.micro_batches_per_flush", &c.micro_batches_per_flush},
      {"pipeline.flushless", &c.pipeline_flushless},
      {"pipeline.flushless_ahead", &c.pipeline_flushless_ahead},
      {"pipeline.tensor_parallel", &c.tensor_parallel},
      {"pipeline.layout", &c.layout},
      {"pipeline.plan_file", &c.plan_file, true},
      {"pipeline.placement", &c.placement},
      {"pipeline.plan_candidates", &c.plan_candidates},
      {"network.matrix", &c.network_matrix, true},
      {"network.deadline_s", &c.network_deadline_s},
      {"network.probe_bytes", &c.probe_bytes},
      {"network.gradient_bucket_mb", &c.gradient_bucket_mb},
      {"network.transport", &c.transport},
      {"compression.gradients", &c.gradient_wire},
      {"compression.activations", &c.activation_wire},
      {"compression.activation_gradients", &c.activation_gradient_wire},
      {"compression.tied_embedding", &c.tied_embedding_wire},
      {"compression.group_size", &c.compression_group_size},
      {"compression.topk_fraction", &c.compression_topk_fraction},
      {"checkpoint.dir", &c.checkpoint_dir},
      {"checkpoint.every_steps", &c.checkpoint_every_steps},
      {"checkpoint.keep", &c.checkpoint_keep},
      {"checkpoint.resume", &c.checkpoint_resume},
      {"checkpoint.init_from", &c.checkpoint_init_from},
      {"checkpoint.asynchronous", &c.checkpoint_asynchronous},
      {"checkpoint.deadline_s", &c.checkpoint_deadline_s},
      {"checkpoint.snapshot", &c.checkpoint_snapshot},
      {"checkpoint.form", &c.checkpoint_form},
      {"timing.file", &c.timing_file},
      {"timing.max_event_steps", &c.timing_max_event_steps},
      {"outer.local_steps", &c.outer_local_steps},
      {"outer.learning_rate", &c.outer_learning_rate},
      {"outer.momentum", &c.outer_momentum},
      {"outer.fragments", &c.outer_fragments},
      {"outer.sync_within_site", &c.outer_sync_within_site},
      {"outer.synchronous_steps", &c.outer_synchronous_steps},
      {"emulation.compute_slowdown", &c.compute_slowdown},
      {"optimizer.kind", &c.optimizer_kind},
      {"optimizer.learning_rate", &c.learning_rate},
      {"optimizer.min_learning_rate_fraction", &c.min_learning_rate_fraction},
      {"optimizer.warmup_steps", &c.warmup_steps},
      {"optimizer.decay_steps", &c.decay_steps},
      {"optimizer.beta1", &c.beta1},
      {"optimizer.beta2", &c.beta2},
      {"optimizer.epsilon", &c.epsilon},
      {"optimizer.weight_decay", &c.weight_decay},
      {"optimizer.gradient_clip", &c.gradient_clip},
  };
}

[[noreturn]] void fail(const std::string& where, const std::string& key, const std::string& what) {
  throw InputError(where + ": " + key + ": " + what);
}

std::string unknown_key(Config& c, const std::string& key) {
  std::vector<std::string> known;
  for (const Field& f : fields(c)) known.emplace_back(f.key);
  return unknown_key_message(key, known);
}

Field* find(std::vector<Field>& all, const std::string& key) {
  for (Field& f : all) {
    if (key == f.key) return &f;
  }
  return nullptr;
}

// Assigns a TOML value; `where` names the file for messages.
void assign(Field& f, const toml::node& node, const std::string& where, const std::string& base_dir) {
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
  auto all = fields(c);
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
  auto all = fields(c);
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

void check(const Config& c) {
  auto fail = [&](const std::string&, const std::string& key, const std::string& what) {
    throw InputError(c.origin_of(key) + ": " + key + ": " + what);
  };
  const std::string where;  // each failure names its key's origin
  auto positive = [&](const char* key, long long v) {
    if (v <= 0) fail(where, key, "must be > 0, got " + std::to_string(v));
  };
  positive("train.steps", c.train_steps);
  positive("train.micro_batch_sequences", c.micro_batch_sequences);
  positive("train.gradient_accumulation", c.gradient_accumulation);
  positive("train.eval_batches", c.eval_batches);
  positive("train.log_every_steps", c.log_every_steps);
  positive("pipeline.stages", c.pipeline_stages);
  positive("pipeline.plan_candidates", c.plan_candidates);
  if (c.tensor_parallel < 0 || (c.tensor_parallel == 0 && c.layout != LayoutChoice::automatic)) {
    fail(where, "pipeline.tensor_parallel", "must be >= 1 (0: chosen by the layout search, with pipeline.layout = "
         "auto), got " + std::to_string(c.tensor_parallel));
  }
  positive("network.probe_bytes", c.probe_bytes);
  positive("train.sample_tokens", c.sample_tokens);
  if (c.gradient_accumulation > 16000) {
    fail(where, "train.gradient_accumulation", "must be <= 16000 (message tags), got " + std::to_string(c.gradient_accumulation));
  }
  positive("checkpoint.keep", c.checkpoint_keep);
  for (const auto& [key, size] : {std::pair{"model.layers", c.model_layers}, std::pair{"model.hidden", c.model_hidden},
                                  std::pair{"model.heads", c.model_heads}, std::pair{"model.vocabulary", c.model_vocabulary},
                                  std::pair{"model.sequence_length", c.model_sequence_length}}) {
    if (size < 0 || size > kMaxModelDimension) {
      fail(where, key, "must be in [1, " + std::to_string(kMaxModelDimension) + "], got " + std::to_string(size));
    }
  }
  if (c.checkpoint_resume == "auto" && c.checkpoint_dir.empty()) {
    fail(where, "checkpoint.resume", "auto needs checkpoint.dir (where to look for the latest checkpoint)");
  }
  if (c.compression_group_size < 2 || c.compression_group_size > 65536) {
    fail(where, "compression.group_size", "must be in [2, 65536], got " + std::to_string(c.compression_group_size));
  }
  if (!(c.compression_topk_fraction > 0) || c.compression_topk_fraction > 1) {
    fail(where, "compression.topk_fraction", "must be in (0, 1], got " + std::to_string(c.compression_topk_fraction));
  }
  for (const auto& [key, format] : {std::pair{"compression.gradients", c.gradient_wire},
                                    std::pair{"compression.tied_embedding", c.tied_embedding_wire}}) {
    if (format != WireFormat::fp32 && c.transport == Transport::nccl) {
      fail(where, key, "needs network.transport = mpi (NCCL sums fp32 on the GPU)");
    }
  }
  for (const auto& [key, format] : {std::pair{"compression.activations", c.activation_wire},
                                    std::pair{"compression.activation_gradients", c.activation_gradient_wire}}) {
    if (format == WireFormat::topk) fail(where, key, "must be fp32, int8 or int4 (top-k needs error feedback)");
    if (format != WireFormat::fp32 && c.transport == Transport::nccl) {
      fail(where, key, "needs network.transport = mpi (messages are encoded on the host)");
    }
  }
  if (!c.checkpoint_init_from.empty() && !c.checkpoint_resume.empty() && c.checkpoint_resume != "auto") {
    fail(where, "checkpoint.init_from", "cannot be combined with checkpoint.resume = \"" + c.checkpoint_resume +
         "\" (init_from starts a new run from weights; resume continues one)");
  }
  if (c.transport == Transport::nccl && c.device == DeviceRequest::cpu) {
    fail(where, "network.transport", "nccl needs device.kind = cuda or auto (NCCL moves GPU memory)");
  }
  if (!c.layers_per_stage.empty() && static_cast<int>(c.layers_per_stage.size()) != c.pipeline_stages) {
    fail(where, "pipeline.layers_per_stage", "has " + std::to_string(c.layers_per_stage.size()) +
         " entries but pipeline.stages is " + std::to_string(c.pipeline_stages));
  }
  auto finite_range = [&](const char* key, double v, double lo, double hi) {
    if (!std::isfinite(v) || v < lo || v > hi) {
      fail(where, key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(v));
    }
  };
  for (double factor : c.compute_slowdown) finite_range("emulation.compute_slowdown", factor, 1, 1000);
  if (c.micro_batches_per_flush > 0 && c.gradient_accumulation % c.micro_batches_per_flush != 0) {
    fail(where, "pipeline.micro_batches_per_flush", "is " + std::to_string(c.micro_batches_per_flush) +
         ", which does not divide train.gradient_accumulation (" + std::to_string(c.gradient_accumulation) + ")");
  }
  if (!c.plan_file.empty() && (c.layout == LayoutChoice::automatic || !c.layers_per_stage.empty())) {
    fail(where, "pipeline.plan_file", std::string("cannot be combined with ") +
         (c.layout == LayoutChoice::automatic ? "pipeline.layout = auto" : "pipeline.layers_per_stage") +
         " (the plan file fixes the layout)");
  }
  if (c.layout == LayoutChoice::automatic && !c.layers_per_stage.empty()) {
    fail(where, "pipeline.layers_per_stage", "cannot be combined with pipeline.layout = auto (the search splits the layers)");
  }
  finite_range("optimizer.learning_rate", c.learning_rate, 1e-12, 10);
  finite_range("optimizer.min_learning_rate_fraction", c.min_learning_rate_fraction, 0, 1);
  finite_range("optimizer.beta1", c.beta1, 0, 0.999999);
  finite_range("optimizer.beta2", c.beta2, 0, 0.999999);
  finite_range("optimizer.epsilon", c.epsilon, 1e-30, 1);
  finite_range("optimizer.weight_decay", c.weight_decay, 0, 10);
  finite_range("optimizer.gradient_clip", c.gradient_clip, 0, 1e9);
  finite_range("device.peak_tflops", c.device_peak_tflops, 0, 1e6);
  finite_range("network.deadline_s", c.network_deadline_s, 0.01, 1e7);
  finite_range("checkpoint.deadline_s", c.checkpoint_deadline_s, 0.01, 1e7);
  finite_range("network.gradient_bucket_mb", c.gradient_bucket_mb, 0, 1e6);
  finite_range("train.sample_temperature", c.sample_temperature, 0, 1e6);
  finite_range("outer.learning_rate", c.outer_learning_rate, 1e-6, 10);
  finite_range("outer.momentum", c.outer_momentum, 0, 0.999999);
  positive("outer.fragments", c.outer_fragments);
  if (c.outer_local_steps > 0 && c.outer_fragments > c.outer_local_steps) {
    fail(where, "outer.fragments", "must be <= outer.local_steps (" + std::to_string(c.outer_local_steps) +
         "): each fragment is synchronised once every local_steps steps, one step apart at least; got " +
         std::to_string(c.outer_fragments));
  }
  if (c.pipeline_flushless) {
    const char* key = "pipeline.flushless";
    if (c.pipeline_schedule != plan::Schedule::one_f_one_b) fail(where, key, "needs pipeline.schedule = \"1f1b\"");
    if (c.micro_batches_per_flush > 0 && c.micro_batches_per_flush != c.gradient_accumulation) {
      fail(where, key, "cannot be combined with pipeline.micro_batches_per_flush (there are no flushes)");
    }
    if (c.pipeline_flushless_ahead < 0) fail(where, "pipeline.flushless_ahead", "must be >= 0");
    const int slots = plan::flushless_slots(c.pipeline_stages, std::max(0, c.pipeline_flushless_ahead));
    if (c.gradient_accumulation < slots) {
      fail(where, "train.gradient_accumulation",
           "must be >= (1 + pipeline.flushless_ahead) x (pipeline.stages - 1) + 1 = " + std::to_string(slots) +
               " with pipeline.flushless (the micro-batches in flight at the first stage); got " +
               std::to_string(c.gradient_accumulation));
    }
    if (!c.checkpoint_dir.empty() || !c.checkpoint_resume.empty()) {
      fail(where, key, std::string("cannot be combined with ") +
                           (c.checkpoint_dir.empty() ? "checkpoint.resume" : "checkpoint.dir") + " yet (a checkpoint would have to hold both weight "
                       "versions and the next step's micro-batches in flight)");
    }
    if (c.outer_fragments > 1) fail(where, key, "cannot be combined with outer.fragments > 1 yet (streamed fragments)");
    if (c.tensor_parallel != 1) fail(where, key, "needs pipeline.tensor_parallel = 1");
    if (c.transport == Transport::nccl) fail(where, key, "needs network.transport = mpi");
  }
  if (!c.pipeline_flushless && c.pipeline_flushless_ahead != 0) {
    fail(where, "pipeline.flushless_ahead", "needs pipeline.flushless = true");
  }
  if (c.outer_sync_within_site && c.outer_local_steps == 0) {
    fail(where, "outer.sync_within_site", "needs outer.local_steps >= 1 (without local steps every replica sums every step)");
  }
  if (c.outer_synchronous_steps < 0) {
    fail(where, "outer.synchronous_steps", "must be >= 0, got " + std::to_string(c.outer_synchronous_steps));
  }
  if (c.outer_synchronous_steps > 0 && c.outer_local_steps == 0) {
    fail(where, "outer.synchronous_steps", "needs outer.local_steps >= 1 (without local steps every step is synchronous)");
  }
  if (c.outer_synchronous_steps > 0 && c.pipeline_flushless) {
    fail(where, "outer.synchronous_steps", "cannot be combined with pipeline.flushless yet (the stream would have to "
         "change its per-step sum in flight)");
  }
  if (c.outer_local_steps > 0 && c.transport == Transport::nccl) {
    fail(where, "outer.local_steps", "needs network.transport = mpi (the outer step runs on the host)");
  }
  if (c.warmup_steps > c.train_steps) {
    fail(where, "optimizer.warmup_steps", "is larger than train.steps (" + std::to_string(c.train_steps) + ")");
  }
}

// A TOML basic string, so that describe() stays one line per key (a
// sample prompt may hold a line break).
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

ModelFile load_model(const Config& config) {
  ModelFile file = load_model_file(config.model_file);
  const std::pair<int, int*> overrides[] = {
      {config.model_layers, &file.model.layers},       {config.model_hidden, &file.model.hidden},
      {config.model_heads, &file.model.heads},         {config.model_vocabulary, &file.model.vocabulary},
      {config.model_sequence_length, &file.model.sequence_length}};
  for (const auto& [value, target] : overrides) {
    if (value > 0) *target = value;
  }
  if (config.model_lm_head != LmHead::model_file) file.model.tied_head = config.model_lm_head == LmHead::tied;
  // The file itself was checked; only an override can break hidden % heads.
  if (config.model_heads > 0 || config.model_hidden > 0) {
    check_model_shape(TomlReader(config.origin_of(config.model_heads > 0 ? "model.heads" : "model.hidden")), "model",
                      file.model);
  }
  return file;
}

plan::OuterSync outer_sync(const Config& c) {
  plan::OuterSync outer;
  outer.local_steps = c.outer_local_steps;
  outer.fragments = c.outer_fragments;
  outer.within_site = c.outer_sync_within_site;
  if (c.gradient_wire != WireFormat::fp32) {
    outer.wire = WireEncoding{c.gradient_wire, c.compression_group_size, c.compression_topk_fraction};
  }
  return outer;
}

std::string describe(const Config& config) {
  Config copy = config;
  std::ostringstream out;
  for (const Field& f : fields(copy)) {
    out << f.key << " = ";
    std::visit(
        [&](auto* target) {
          using T = std::remove_pointer_t<decltype(target)>;
          if constexpr (std::is_same_v<T, std::string>) out << toml_string(*target);
          else if constexpr (std::is_same_v<T, bool>) out << (*target ? "true" : "false");
          else if constexpr (std::is_enum_v<T>) out << '"' << to_string(*target) << '"';
          else if constexpr (std::is_same_v<T, std::vector<int>> || std::is_same_v<T, std::vector<double>>) {
            out << '[';
            for (std::size_t i = 0; i < target->size(); ++i) out << (i ? ", " : "") << (*target)[i];
            out << ']';
          }
          else out << *target;
        },
        f.target);
    out << "\n";
  }
  return out.str();
}

}  // namespace geotrain::io
