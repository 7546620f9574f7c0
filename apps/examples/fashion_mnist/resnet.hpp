#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <vector>

namespace fashion_mnist {

// torchvision's BasicBlock: two 3x3 convolutions with batch norm, and a 1x1 projection on the
// shortcut when the shape changes.
class BasicBlockImpl : public torch::nn::Module {
 public:
  BasicBlockImpl(std::int64_t in_channels, std::int64_t channels, std::int64_t stride);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
  torch::nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(BasicBlock);

// torchvision's ResNet with BasicBlocks: resnet18 is blocks {2, 2, 2, 2}. The first convolution
// is 7x7 with stride 2 as in torchvision, taking `in_channels` (1 for FashionMNIST).
class ResNetImpl : public torch::nn::Module {
 public:
  ResNetImpl(const std::vector<int>& blocks, std::int64_t in_channels, std::int64_t num_classes);
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::nn::Sequential make_layer(std::int64_t channels, int blocks, std::int64_t stride);

  std::int64_t in_channels_ = 64;
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  torch::nn::MaxPool2d maxpool_{nullptr};
  torch::nn::Sequential layer1_{nullptr}, layer2_{nullptr}, layer3_{nullptr}, layer4_{nullptr};
  torch::nn::Linear fc_{nullptr};
};
TORCH_MODULE(ResNet);

ResNet resnet18(std::int64_t in_channels, std::int64_t num_classes);

}  // namespace fashion_mnist
