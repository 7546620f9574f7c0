#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>

namespace trainrun::runtime {

// State dicts in torch.save's format, shared with Python both ways: torch.load(path) reads what
// save_state_dict writes (weights_only=True too: a plain dict of name to tensor), and
// load_state_dict reads what Python wrote with torch.save(dict(model.state_dict()), path).

// Writes every parameter and buffer of `module` (its state dict) to `path`.
void save_state_dict(const torch::nn::Module& module, const std::filesystem::path& path);

// The name-to-tensor dict in `path` with every tensor read onto `device`, as torch.load's
// map_location does: a checkpoint written on cuda:0 loads on a machine without a GPU, or on
// another rank's GPU, without first landing on the device it was saved from.
std::map<std::string, torch::Tensor> load_tensors(const std::filesystem::path& path,
                                                  const torch::Device& device);

// Copies the state dict in `path` into `module`'s parameters and buffers, strictly, as PyTorch's
// load_state_dict: a missing or unexpected name, or a shape that differs, throws RuntimeError
// naming every one. The tensors are read onto `device` (by default get_device(), the rank's
// training device), never onto the device recorded in the file.
void load_state_dict(torch::nn::Module& module, const std::filesystem::path& path,
                     std::optional<torch::Device> device = std::nullopt);

}  // namespace trainrun::runtime
