// The shape of a GPT model: the one description that `train`, `plan` and
// `simulate` read from a model file (inputs/models/*.toml, io/model_file.hpp).
// Header-only and dependency-free, so the pure planning library can use it.
#pragma once
#include <string>
#include <vector>

namespace geotrain {

// The largest size any shape key may take: byte counts built from products
// of two sizes then stay far inside 64 bits.
inline constexpr int kMaxModelDimension = 1 << 30;

struct ModelShape {
  std::string name = "tiny";
  int layers = 4;
  int hidden = 128;
  int heads = 4;
  int vocabulary = 256;
  int sequence_length = 128;
  // The LM head is the token embedding wte (GPT-2); false: its own V x H
  // matrix "lm_head.weight" on the last stage.
  bool tied_head = true;
};

// "L layers, hidden H, A heads, vocabulary V, T positions": for messages.
inline std::string shape_text(const ModelShape& m) {
  return std::to_string(m.layers) + " layers, hidden " + std::to_string(m.hidden) + ", " + std::to_string(m.heads) +
         " heads, vocabulary " + std::to_string(m.vocabulary) + ", " + std::to_string(m.sequence_length) +
         " positions";
}

// "[d0, d1, ...]": a tensor's dimensions, for messages.
template <class Integer>
std::string dims_text(const std::vector<Integer>& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// GPT3-XL as the paper plans it (reference dtfm-paper.md §2.1): the
// planner's model when a scenario names none.
inline ModelShape gpt3_xl_shape() { return {"gpt3-xl", 24, 2048, 16, 50257, 2048}; }

}  // namespace geotrain
