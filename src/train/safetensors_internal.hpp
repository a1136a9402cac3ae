// write_safetensors with a durable::WriteMode: the training-state store writes its files in place
// inside a temporary directory that is renamed into place whole (a rename per file adds nothing).
// And into a FileWriter the caller finishes: save_gpt_hf replaces the weights and config.json
// together.
#pragma once

#include <map>
#include <string>

#include "ember/train/safetensors.hpp"
#include "train/durable_files.hpp"

namespace ember::train {

WrittenFile write_safetensors(const std::string& path, const NamedViews& tensors,
                              const std::map<std::string, std::string>& metadata,
                              durable::WriteMode mode);
// Writes the file's bytes into `file` and leaves it unfinished (the caller syncs and commits it).
WrittenFile write_safetensors(durable::FileWriter& file, const StateDict& tensors,
                              const std::map<std::string, std::string>& metadata);

}  // namespace ember::train
