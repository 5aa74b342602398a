#include "geotrain/io/hf_gpt2.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "geotrain/common/errors.hpp"
#include "geotrain/common/model_shape.hpp"
#include "geotrain/io/safetensors.hpp"

namespace geotrain::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// geotrain's layer norm and GELU (src/kernels/op_constants.hpp): the
// architecture a converted model must have to compute the same function.
constexpr double kLayerNormEpsilon = 1e-5;
// HF's names for GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x +
// 0.044715 x^3))); "gelu" is the exact erf form, which geotrain lacks.
const char* const kTanhGelus[] = {"gelu_new", "gelu_pytorch_tanh", "gelu_fast"};

const std::string kPrefix = "transformer.";

std::vector<std::int64_t> hf_shape(const HfTensorName& t) {
  std::vector<std::int64_t> shape(t.shape.begin(), t.shape.end());
  if (t.conv1d) std::swap(shape[0], shape[1]);
  return shape;
}

// rows x cols row-major -> cols x rows row-major.
std::vector<float> transposed(const std::vector<float>& in, std::size_t rows, std::size_t cols) {
  std::vector<float> out(in.size());
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
  }
  return out;
}

json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot open file");
  try {
    json value = json::parse(in);
    if (!value.is_object()) throw InputError(path + ": must be a JSON object");
    return value;
  } catch (const json::parse_error& e) {
    throw InputError(path + ": not valid JSON at byte " + std::to_string(e.byte));
  } catch (const json::exception&) {  // e.g. a number beyond any range
    throw InputError(path + ": not valid JSON (a number out of range)");
  }
}

int positive_int(const json& config, const std::string& path, const char* key) {
  if (!config.contains(key)) throw InputError(path + ": " + key + ": missing");
  const json& v = config[key];
  if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > (1 << 30)) {
    throw InputError(path + ": " + key + ": must be a positive integer, got " + v.dump());
  }
  return v.get<int>();
}

// `key`, where present, must be the JSON value `want`; `what` says why.
void require_value(const json& config, const std::string& path, const char* key, const json& want,
                   const std::string& what) {
  if (config.contains(key) && !config[key].is_null() && config[key] != want) {
    throw InputError(path + ": " + key + ": " + config[key].dump() + " is not supported (" + what + ")");
  }
}

void check_architecture(const json& config, const std::string& path, int hidden) {
  require_value(config, path, "model_type", "gpt2", "geotrain converts GPT-2 models only");
  if (config.contains("architectures")) {
    for (const json& name : config["architectures"]) {
      if (name != "GPT2LMHeadModel" && name != "GPT2Model") {
        throw InputError(path + ": architectures: " + name.dump() +
                         " is not supported (GPT2LMHeadModel or GPT2Model are)");
      }
    }
  }
  if (config.contains("activation_function") && !config["activation_function"].is_string()) {
    throw InputError(path + ": activation_function: must be a string");
  }
  const std::string gelu = config.value("activation_function", std::string("gelu_new"));
  if (std::find(std::begin(kTanhGelus), std::end(kTanhGelus), gelu) == std::end(kTanhGelus)) {
    throw InputError(path + ": activation_function: '" + gelu +
                     "' is not implemented (geotrain computes GELU's tanh approximation: gelu_new)");
  }
  if (config.contains("layer_norm_epsilon")) {
    const json& eps = config["layer_norm_epsilon"];
    if (!eps.is_number() || std::abs(eps.get<double>() - kLayerNormEpsilon) > 1e-9 * kLayerNormEpsilon) {
      throw InputError(path + ": layer_norm_epsilon: " + eps.dump() + " differs from geotrain's layer norm (1e-05)");
    }
  }
  require_value(config, path, "n_inner", 4 * hidden, "geotrain's MLP is 4 x n_embd wide");
  require_value(config, path, "scale_attn_weights", true, "geotrain scales attention by 1/sqrt(head size)");
  require_value(config, path, "scale_attn_by_inverse_layer_idx", false, "not implemented by geotrain");
  require_value(config, path, "add_cross_attention", false, "geotrain is decoder-only");
  require_value(config, path, "tie_word_embeddings", true, "geotrain ties the LM head to wte");
}

// The tensor named `name` (bare or under "transformer.") of `file`, checked
// against its Hugging Face shape, in geotrain's layout.
std::vector<float> read_tensor(SafetensorsReader& file, const HfTensorName& t) {
  const SafetensorsEntry* e = file.find(t.hf);
  if (e == nullptr) e = file.find(kPrefix + t.hf);
  if (e == nullptr) throw InputError(file.path() + ": tensor '" + t.hf + "': missing");
  if (e->shape != hf_shape(t)) {
    throw InputError(file.path() + ": tensor '" + e->name + "': shape " + dims_text(e->shape) +
                     ", but config.json's model needs " + dims_text(hf_shape(t)));
  }
  std::vector<float> values = file.read_floats(*e);
  if (t.conv1d) values = transposed(values, e->shape[0], e->shape[1]);
  return values;
}

// Every tensor of the file is a parameter, a skipped buffer, or the tied
// head equal to wte; none appears twice (bare and prefixed).
void check_tensor_names(SafetensorsReader& file, const std::vector<HfTensorName>& names, const ModelShape& model) {
  static const std::regex buffer(R"(h\.[0-9]+\.attn\.(bias|masked_bias))");
  std::map<std::string, std::string> seen;
  for (const SafetensorsEntry& e : file.entries()) {
    const std::string bare = e.name.rfind(kPrefix, 0) == 0 ? e.name.substr(kPrefix.size()) : e.name;
    if (!seen.emplace(bare, e.name).second) {
      throw InputError(file.path() + ": tensor '" + e.name + "': also stored as '" + seen[bare] + "'");
    }
    if (std::regex_match(bare, buffer)) continue;
    if (bare == "lm_head.weight") {
      const HfTensorName head{"lm_head.weight", "wte", {model.vocabulary, model.hidden}, false};
      const HfTensorName wte{"wte.weight", "wte", head.shape, false};
      if (read_tensor(file, head) != read_tensor(file, wte)) {
        throw InputError(file.path() + ": tensor 'lm_head.weight': differs from wte.weight (geotrain ties them)");
      }
      continue;
    }
    const bool known = std::any_of(names.begin(), names.end(), [&](const HfTensorName& t) { return t.hf == bare; });
    if (!known) {
      throw InputError(file.path() + ": tensor '" + e.name + "': not a parameter of config.json's GPT-2 (" +
                       std::to_string(model.layers) + " layers)");
    }
  }
}

std::string folder_name(const std::string& dir) {
  const fs::path path = fs::path(dir).lexically_normal();
  const std::string name = (path.has_filename() ? path.filename() : path.parent_path().filename()).string();
  return name.empty() || name == "." ? "hf-gpt2" : name;
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw RunError(path + ": cannot write");
}

}  // namespace

std::vector<HfTensorName> hf_gpt2_tensor_names(const ModelShape& m) {
  const int C = m.hidden;
  std::vector<HfTensorName> names = {{"wte.weight", "wte", {m.vocabulary, C}, false},
                                     {"wpe.weight", "wpe", {m.sequence_length, C}, false}};
  const HfTensorName layer[] = {
      {"ln_1.weight", "ln1.weight", {C}, false},           {"ln_1.bias", "ln1.bias", {C}, false},
      {"attn.c_attn.weight", "attn.qkv.weight", {3 * C, C}, true},
      {"attn.c_attn.bias", "attn.qkv.bias", {3 * C}, false},
      {"attn.c_proj.weight", "attn.proj.weight", {C, C}, true},
      {"attn.c_proj.bias", "attn.proj.bias", {C}, false},  {"ln_2.weight", "ln2.weight", {C}, false},
      {"ln_2.bias", "ln2.bias", {C}, false},               {"mlp.c_fc.weight", "mlp.fc.weight", {4 * C, C}, true},
      {"mlp.c_fc.bias", "mlp.fc.bias", {4 * C}, false},    {"mlp.c_proj.weight", "mlp.proj.weight", {C, 4 * C}, true},
      {"mlp.c_proj.bias", "mlp.proj.bias", {C}, false}};
  for (int l = 0; l < m.layers; ++l) {
    const std::string at = "h." + std::to_string(l) + ".";
    for (const HfTensorName& t : layer) names.push_back({at + t.hf, at + t.geotrain, t.shape, t.conv1d});
  }
  names.push_back({"ln_f.weight", "lnf.weight", {C}, false});
  names.push_back({"ln_f.bias", "lnf.bias", {C}, false});
  return names;
}

ModelShape read_hf_gpt2_config(const std::string& path) {
  const json config = read_json_file(path);
  // First: a BERT or Llama folder lacks GPT-2's keys, and "n_layer: missing" would not say why.
  require_value(config, path, "model_type", "gpt2", "not a GPT-2 model: geotrain converts GPT-2 models only");
  ModelShape m;
  m.layers = positive_int(config, path, "n_layer");
  m.hidden = positive_int(config, path, "n_embd");
  m.heads = positive_int(config, path, "n_head");
  m.vocabulary = positive_int(config, path, "vocab_size");
  // n_ctx: the older name of the same size.
  m.sequence_length = positive_int(config, path, config.contains("n_ctx") && !config.contains("n_positions") ? "n_ctx" : "n_positions");
  if (m.hidden % m.heads != 0) {
    throw InputError(path + ": n_head: " + std::to_string(m.heads) + " does not divide n_embd " +
                     std::to_string(m.hidden));
  }
  if (m.vocabulary > 65536) {
    throw InputError(path + ": vocab_size: " + std::to_string(m.vocabulary) +
                     " is more than geotrain's token shards hold (65536)");
  }
  check_architecture(config, path, m.hidden);
  return m;
}

Checkpoint read_hf_gpt2(const std::string& dir, int sequence_length) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  const std::string weights_path = (fs::path(dir) / "model.safetensors").string();
  Checkpoint c;
  c.weights_only = true;
  c.model = read_hf_gpt2_config(config_path);
  c.model.name = folder_name(dir);
  if (!fs::exists(weights_path) && fs::exists(fs::path(dir) / "model.safetensors.index.json")) {
    throw InputError(weights_path + ": missing (weights sharded over several files are not supported)");
  }
  if (!fs::exists(weights_path) && fs::exists(fs::path(dir) / "pytorch_model.bin")) {
    throw InputError(weights_path + ": missing: the folder holds pytorch_model.bin (PyTorch's pickle, which geotrain "
                     "does not read); save it as safetensors first: GPT2LMHeadModel.from_pretrained(folder)"
                     ".save_pretrained(folder, safe_serialization=True)");
  }
  if (sequence_length > c.model.sequence_length) {
    throw InputError("command line: --sequence-length: " + std::to_string(sequence_length) + " is more than " +
                     config_path + "'s n_positions " + std::to_string(c.model.sequence_length));
  }
  SafetensorsReader file(weights_path);
  const std::vector<HfTensorName> names = hf_gpt2_tensor_names(c.model);
  check_tensor_names(file, names, c.model);
  const int keep_positions = sequence_length > 0 ? sequence_length : c.model.sequence_length;
  for (const HfTensorName& t : names) {
    CheckpointTensor tensor{t.geotrain, t.shape, read_tensor(file, t), {}, {}};
    if (t.geotrain == "wpe") {
      tensor.shape[0] = keep_positions;
      tensor.value.resize(static_cast<std::size_t>(keep_positions) * c.model.hidden);
    }
    c.tensors.push_back(std::move(tensor));
  }
  c.model.sequence_length = keep_positions;
  return c;
}

namespace {

// The tokenizer a checkpoint was trained with (the tokenizers library's
// JSON, as prepare_data.py wrote it) in the files AutoTokenizer.from_pretrained
// reads; none for the byte tokenizer, which has no such file.
std::vector<std::pair<std::string, std::string>> hf_tokenizer_files(const std::string& tokenizer_text,
                                                                     int sequence_length) {
  if (tokenizer_text.empty()) return {};
  json settings = {{"tokenizer_class", "PreTrainedTokenizerFast"}, {"model_max_length", sequence_length}};
  if (tokenizer_text.find("\"<|endoftext|>\"") != std::string::npos) {  // GPT-2's one special token, as prepare_data adds it
    for (const char* role : {"bos_token", "eos_token", "unk_token"}) settings[role] = "<|endoftext|>";
  }
  return {{"tokenizer.json", tokenizer_text}, {"tokenizer_config.json", settings.dump(2) + "\n"}};
}

}  // namespace

void write_hf_gpt2(Checkpoint checkpoint, const std::string& origin, const std::string& dir) {
  const ModelShape m = checkpoint.model;
  if (!m.tied_head) {
    throw InputError(origin + ": attribute model_lm_head: untied; a GPT-2 folder ties its head to wte (train with a tied head to export)");
  }
  std::vector<SafetensorsTensor> tensors;
  for (const HfTensorName& t : hf_gpt2_tensor_names(m)) {
    auto stored = std::find_if(checkpoint.tensors.begin(), checkpoint.tensors.end(),
                               [&](const CheckpointTensor& c) { return c.name == t.geotrain; });
    if (stored == checkpoint.tensors.end()) throw InputError(origin + ": /params/" + t.geotrain + ": missing");
    if (stored->shape != t.shape) {
      throw InputError(origin + ": /params/" + t.geotrain + ": shape differs from the model's attributes");
    }
    // Moved out, not copied: a model's floats are held once (GPT-2 XL: 6 GB).
    std::vector<float> values = std::move(stored->value);
    if (t.conv1d) values = transposed(values, t.shape[0], t.shape[1]);
    tensors.push_back({kPrefix + t.hf, hf_shape(t), std::move(values)});
  }
  const json config = {{"architectures", json::array({"GPT2LMHeadModel"})},
                       {"model_type", "gpt2"},
                       {"n_layer", m.layers},
                       {"n_embd", m.hidden},
                       {"n_head", m.heads},
                       {"vocab_size", m.vocabulary},
                       {"n_positions", m.sequence_length},
                       {"n_ctx", m.sequence_length},
                       {"n_inner", nullptr},
                       {"activation_function", "gelu_new"},
                       {"layer_norm_epsilon", kLayerNormEpsilon},
                       {"tie_word_embeddings", true},
                       {"scale_attn_weights", true},
                       {"torch_dtype", "float32"}};
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) throw RunError(dir + ": cannot create the folder: " + error.message());
  // Each file appears whole or not at all: written aside, then renamed.
  const fs::path weights = fs::path(dir) / "model.safetensors", config_file = fs::path(dir) / "config.json";
  write_safetensors(weights.string() + ".tmp", tensors, {{"format", "pt"}});
  write_text_file(config_file.string() + ".tmp", config.dump(2) + "\n");
  std::vector<fs::path> written = {weights, config_file};
  for (auto& [name, text] : hf_tokenizer_files(checkpoint.tokenizer_text, m.sequence_length)) {
    written.push_back(fs::path(dir) / name);
    write_text_file(written.back().string() + ".tmp", text);
  }
  for (const fs::path& path : written) {
    fs::rename(path.string() + ".tmp", path, error);
    if (error) throw RunError(path.string() + ".tmp: cannot rename: " + error.message());
  }
}

}  // namespace geotrain::io
