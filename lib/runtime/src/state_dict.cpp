#include <sys/types.h>  // off_t, which in_memory_adapter.h uses without including

#include <caffe2/serialize/in_memory_adapter.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <fstream>
#include <optional>
#include <string>
#include <trainrun/base/files.hpp>
#include <trainrun/runtime/errors.hpp>
#include <trainrun/runtime/process_group.hpp>
#include <trainrun/runtime/state_dict.hpp>
#include <utility>
#include <vector>

namespace trainrun::runtime {

namespace {

// torch::pickle_save's format (torch.save's zip) without the type tags it puts on a typed dict:
// torch.load's default weights_only=True (PyTorch 2.6 on) refuses the function that restores them.
std::vector<char> save_plain(const c10::IValue& value) {
  std::vector<char> pickle;
  torch::jit::Pickler pickler(
      [&](const char* bytes, size_t size) { pickle.insert(pickle.end(), bytes, bytes + size); },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
      /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  std::vector<char> container;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
    const char* bytes = static_cast<const char*>(data);
    container.insert(container.end(), bytes, bytes + size);
    return size;
  });
  torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(),
                                     writer);
  writer.writeEndOfFile();
  return container;
}

std::string read_bytes(const std::filesystem::path& path) {
  std::optional<std::string> bytes = read_file(path.string());
  if (!bytes) throw RuntimeError("cannot open " + path.string());
  return std::move(*bytes);
}

// torch::pickle_load, with the tensors' storages read onto `device` (its map_location).
c10::IValue read_archive(const std::filesystem::path& path, const torch::Device& device) {
  const std::string bytes = read_bytes(path);
  try {
    caffe2::serialize::PyTorchStreamReader reader(
        std::make_unique<caffe2::serialize::MemoryReadAdapter>(bytes.data(), bytes.size()));
    return torch::jit::readArchiveAndTensors("data", "", "", {}, {}, device, reader);
  } catch (const c10::Error& e) {
    throw RuntimeError(path.string() +
                       ": cannot be read as torch.save's format, or holds what LibTorch cannot "
                       "read (Python's OrderedDict: save torch.save(dict(model.state_dict()), "
                       "path)): " + e.what_without_backtrace());
  }
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "\"" : ", \"") + name + "\"";
  return out;
}

}  // namespace

void save_state_dict(const torch::nn::Module& module, const std::filesystem::path& path) {
  c10::Dict<std::string, torch::Tensor> state;
  for (const auto& item : module.named_parameters()) state.insert(item.key(), item.value().detach());
  for (const auto& item : module.named_buffers()) state.insert(item.key(), item.value().detach());
  const std::vector<char> bytes = save_plain(c10::IValue(state));
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw RuntimeError("cannot write " + path.string());
}

std::map<std::string, torch::Tensor> load_tensors(const std::filesystem::path& path,
                                                  const torch::Device& device) {
  const c10::IValue loaded = read_archive(path, device);
  // LibTorch reads Python's OrderedDict (what state_dict() returns) as None: Python must save a
  // plain dict.
  if (!loaded.isGenericDict()) {
    throw RuntimeError(path.string() +
                       ": not a state dict saved as a plain dict; in Python save "
                       "torch.save(dict(model.state_dict()), path)");
  }
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& entry : loaded.toGenericDict()) {
    if (!entry.key().isString() || !entry.value().isTensor()) {
      throw RuntimeError(path.string() + ": a state dict maps names to tensors; this one has " +
                         entry.key().tagKind() + " -> " + entry.value().tagKind());
    }
    tensors.emplace(entry.key().toStringRef(), entry.value().toTensor());
  }
  return tensors;
}

void load_state_dict(torch::nn::Module& module, const std::filesystem::path& path,
                     std::optional<torch::Device> device) {
  std::map<std::string, torch::Tensor> state = load_tensors(path, device ? *device : get_device());
  std::vector<torch::Tensor*> targets;
  std::vector<std::string> missing, mismatched;
  auto match = [&](const std::string& name, torch::Tensor& target) {
    const auto found = state.find(name);
    if (found == state.end()) {
      missing.push_back(name);
    } else if (found->second.sizes() != target.sizes()) {
      mismatched.push_back(name + "\" (" + c10::str(found->second.sizes()) + " in the file, " +
                           c10::str(target.sizes()) + " in the model)");
    }
  };
  auto params = module.named_parameters();
  auto buffers = module.named_buffers();
  for (auto& item : params) match(item.key(), item.value());
  for (auto& item : buffers) match(item.key(), item.value());
  std::vector<std::string> unexpected;
  for (const auto& [name, tensor] : state) {
    if (!params.contains(name) && !buffers.contains(name)) unexpected.push_back(name);
  }
  std::string problems;
  if (!missing.empty()) problems += "; missing: " + joined(missing);
  if (!unexpected.empty()) problems += "; unexpected: " + joined(unexpected);
  if (!mismatched.empty()) problems += "; other shape: " + joined(mismatched);
  if (!problems.empty()) {
    throw RuntimeError(path.string() + ": the state dict does not fit the model" + problems);
  }
  torch::NoGradGuard no_grad;
  for (auto& item : params) item.value().copy_(state.at(item.key()));
  for (auto& item : buffers) item.value().copy_(state.at(item.key()));
}

}  // namespace trainrun::runtime
