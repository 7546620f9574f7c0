// State dicts shared with Python (torch.save / torch.load), read onto a chosen device.
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <trainrun/runtime/errors.hpp>
#include <trainrun/runtime/state_dict.hpp>

#include "worker_processes.hpp"

namespace rt = trainrun::runtime;
using rt::testing::command_output;
using rt::testing::make_temp_dir;

namespace {

torch::nn::Sequential small_model() {
  return torch::nn::Sequential(torch::nn::Linear(4, 3), torch::nn::BatchNorm1d(3));
}

std::string python(const std::string& code) {
  return command_output(std::string(TRAINRUN_TORCH_PYTHON) + " -c '" + code + "'");
}

}  // namespace

TEST_CASE("a state dict saved on cuda:0 loads onto the CPU (torch.load's map_location)") {
  const std::string path = make_temp_dir("state_dict") + "/gpu.pt";
  // What torch.save writes for tensors that live on cuda:0, made without a GPU: the storages'
  // location tag is what a GPU machine would record.
  python(
      "import torch, torch.serialization as s; s.location_tag = lambda storage: \"cuda:0\"; "
      "torch.save({\"w\": torch.arange(6.).reshape(2, 3), \"b\": torch.tensor([7.])}, \"" +
      path + "\")");
  // LibTorch's own loader restores the recorded device, which this machine does not have.
  const std::string bytes = rt::testing::read_file(path);
  REQUIRE_THROWS(torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end())));

  const auto tensors = rt::load_tensors(path, torch::kCPU);
  REQUIRE(tensors.size() == 2);
  REQUIRE(tensors.at("w").device() == torch::Device(torch::kCPU));
  REQUIRE(torch::equal(tensors.at("w"), torch::arange(6.).reshape({2, 3})));
  REQUIRE(tensors.at("b").item<double>() == 7.0);
}

TEST_CASE("save_state_dict and Python's torch.load read each other's files") {
  const std::string dir = make_temp_dir("state_dict");
  torch::manual_seed(1);
  auto model = small_model();
  model->forward(torch::randn({5, 4}));  // moves the BatchNorm running statistics
  rt::save_state_dict(*model, dir + "/cpp.pt");
  // Python reads it with the safe loader, and writes back each tensor plus one.
  const std::string out = python(
      "import torch; d = torch.load(\"" + dir + "/cpp.pt\", weights_only=True); "
      "print(sorted(d)); torch.save({k: v + 1 for k, v in d.items()}, \"" + dir + "/py.pt\")");
  REQUIRE(out.find("'0.weight'") != std::string::npos);
  REQUIRE(out.find("'1.running_mean'") != std::string::npos);
  REQUIRE(out.find("'1.num_batches_tracked'") != std::string::npos);

  auto other = small_model();
  rt::load_state_dict(*other, dir + "/py.pt", torch::kCPU);
  for (const auto& item : model->named_parameters()) {
    REQUIRE(torch::allclose(other->named_parameters()[item.key()], item.value() + 1));
  }
  for (const auto& item : model->named_buffers()) {
    REQUIRE(torch::equal(other->named_buffers()[item.key()], item.value() + 1));
  }
}

TEST_CASE("load_state_dict is strict: missing, unexpected and reshaped names are all named") {
  const std::string dir = make_temp_dir("state_dict");
  python("import torch; torch.save({\"0.weight\": torch.zeros(3, 5), \"0.bias\": torch.zeros(3), "
         "\"extra\": torch.zeros(1)}, \"" + dir + "/bad.pt\")");
  auto model = small_model();
  const torch::Tensor before = model[0]->named_parameters()["weight"].clone();
  try {
    rt::load_state_dict(*model, dir + "/bad.pt", torch::kCPU);
    FAIL("a state dict that does not fit was loaded");
  } catch (const rt::RuntimeError& e) {
    const std::string message = e.what();
    REQUIRE_THAT(message, Catch::Contains("missing: \"1.weight\""));
    REQUIRE_THAT(message, Catch::Contains("unexpected: \"extra\""));
    REQUIRE_THAT(message, Catch::Contains("\"0.weight\" ([3, 5] in the file, [3, 4] in the model)"));
  }
  // Nothing was copied.
  REQUIRE(torch::equal(model[0]->named_parameters()["weight"], before));

  python("import torch, collections; torch.save(collections.OrderedDict(a=torch.zeros(1)), \"" +
         dir + "/ordered.pt\")");
  REQUIRE_THROWS_WITH(rt::load_tensors(dir + "/ordered.pt", torch::kCPU),
                      Catch::Contains("torch.save(dict(model.state_dict()), path)"));
  std::ofstream(dir + "/text.pt") << "not a checkpoint";
  REQUIRE_THROWS_WITH(rt::load_tensors(dir + "/text.pt", torch::kCPU),
                      Catch::Contains("cannot be read as torch.save's format"));
  REQUIRE_THROWS_WITH(rt::load_tensors(dir + "/none.pt", torch::kCPU),
                      Catch::Contains("cannot open"));
}
