// The shape of a GPT model (read from inputs/models/*.toml).
#pragma once
#include <string>

namespace geotrain::model {

struct GptConfig {
  std::string name = "tiny";
  int layers = 4;
  int hidden = 128;
  int heads = 4;
  int vocabulary = 256;
  int sequence_length = 128;
};

}  // namespace geotrain::model
