// geotrain convert: pretrained GPT-2 weights in the Hugging Face layout in
// and out (io/hf_gpt2.hpp), so that a run can start from them
// (checkpoint.init_from) and a trained model can leave for other tools.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>

#include "geotrain/cli/commands.hpp"
#include "geotrain/common/errors.hpp"
#include "geotrain/io/checkpoint.hpp"
#include "geotrain/io/hf_gpt2.hpp"

namespace geotrain::cli {
namespace {

namespace fs = std::filesystem;

int from_hf(const ConvertCommandOptions& o) {
  std::error_code error;
  if (fs::exists(o.out, error) && !o.overwrite) {
    throw InputError("command line: --out: " + o.out + " exists; name a new file, or add --overwrite to replace it");
  }
  const io::Checkpoint checkpoint = io::read_hf_gpt2(o.from_hf, o.sequence_length);
  if (const fs::path parent = fs::path(o.out).parent_path(); !parent.empty()) fs::create_directories(parent, error);
  // Written aside and renamed: a checkpoint file appears whole or not at all.
  const std::string temporary = o.out + ".tmp";
  try {
    io::write_checkpoint_file(temporary, checkpoint);
  } catch (...) {
    fs::remove(temporary, error);
    throw;
  }
  fs::rename(temporary, o.out, error);
  if (error) throw RunError(temporary + ": cannot rename to " + o.out + ": " + error.message());
  std::cout << "geotrain convert: " << o.from_hf << " (GPT-2, " << shape_text(checkpoint.model) << ") -> " << o.out
            << " (weights only; train from it with --checkpoint.init_from=" << o.out << ")\n";
  return 0;
}

// A Hugging Face folder's files that a loader might read beside ours: with
// --overwrite they are removed, so that no stale weights, config or
// tokenizer of another model stay beside the new ones.
constexpr const char* kHfModelFiles[] = {
    "model.safetensors",  "model.safetensors.index.json", "pytorch_model.bin",   "pytorch_model.bin.index.json",
    "tf_model.h5",        "flax_model.msgpack",           "config.json",         "generation_config.json",
    "tokenizer.json",     "tokenizer_config.json",        "special_tokens_map.json", "vocab.json",
    "merges.txt",         "added_tokens.json"};

// --out of --to-hf: a new or empty folder, or (--overwrite) any folder.
// Returns whether it holds files.
bool check_hf_folder(const ConvertCommandOptions& o) {
  std::error_code error;
  if (!fs::exists(o.out, error)) return false;
  if (!fs::is_directory(o.out, error)) {
    throw InputError("command line: --out: " + o.out + " is a file, not a folder (name a new or empty folder)");
  }
  fs::directory_iterator entries(o.out, error);
  if (error) throw InputError("command line: --out: " + o.out + ": cannot list: " + error.message());
  if (entries == fs::directory_iterator()) return false;
  if (!o.overwrite) {
    throw InputError("command line: --out: " + o.out + " is not empty (it holds " +
                     entries->path().filename().string() +
                     "); name a new or empty folder, or add --overwrite to replace its model files");
  }
  return true;
}

int to_hf(const ConvertCommandOptions& o) {
  const bool replacing = check_hf_folder(o);
  io::Checkpoint checkpoint = io::read_checkpoint(o.to_hf);  // read (and verified) before anything is removed
  std::error_code error;
  for (const char* name : kHfModelFiles) {
    if (replacing) fs::remove(fs::path(o.out) / name, error);
  }
  const ModelShape model = checkpoint.model;
  const std::int64_t steps = checkpoint.completed_steps;
  const std::string tokenizer = checkpoint.tokenizer_text.empty()
                                    ? " (no tokenizer files: the byte tokenizer's ids are the bytes)"
                                    : " + tokenizer.json + tokenizer_config.json (AutoTokenizer)";
  io::write_hf_gpt2(std::move(checkpoint), o.to_hf, o.out);
  std::cout << "geotrain convert: " << o.to_hf << " (" << shape_text(model) << ", step " << steps << ") -> "
            << (fs::path(o.out) / "model.safetensors").string() << " + config.json (GPT2LMHeadModel)" << tokenizer
            << "\n";
  return 0;
}

}  // namespace

void add_convert_command(CLI::App& app, ConvertCommandOptions& o) {
  CLI::App* convert = app.add_subcommand(
      "convert", "Convert GPT-2 weights: geotrain convert --from-hf DIR --out FILE.h5 | --to-hf CHECKPOINT.h5 --out DIR");
  CLI::Option* from = convert->add_option(
      "--from-hf", o.from_hf, "Hugging Face folder (config.json + model.safetensors) to read");
  CLI::Option* to = convert->add_option("--to-hf", o.to_hf, "geotrain checkpoint to write as a Hugging Face folder");
  from->excludes(to);
  convert->add_option("--out", o.out, "checkpoint file (--from-hf) or folder (--to-hf) to write")->required();
  convert->add_option("--sequence-length", o.sequence_length,
                      "--from-hf: keep the first N positions of wpe (default: all, n_positions)")
      ->check(CLI::Range(1, 1 << 30))
      ->needs(from);
  convert->add_flag("--overwrite", o.overwrite,
                    "replace what --out names: --from-hf an existing file; --to-hf a folder that is not empty (its "
                    "model, config and tokenizer files)");
}

int run_convert_command(const ConvertCommandOptions& o) {
  if (!o.from_hf.empty()) return from_hf(o);
  if (!o.to_hf.empty()) return to_hf(o);
  throw InputError("command line: convert: needs --from-hf DIR or --to-hf CHECKPOINT (see geotrain convert --help)");
}

}  // namespace geotrain::cli
