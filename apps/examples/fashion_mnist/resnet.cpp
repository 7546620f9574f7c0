#include "resnet.hpp"

#include <torch/nn/functional/activation.h>
#include <torch/nn/init.h>

namespace fashion_mnist {

namespace nn = torch::nn;

namespace {

nn::Conv2d conv(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride,
                std::int64_t padding) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding).bias(false));
}

}  // namespace

BasicBlockImpl::BasicBlockImpl(std::int64_t in_channels, std::int64_t channels,
                               std::int64_t stride) {
  conv1_ = register_module("conv1", conv(in_channels, channels, 3, stride, 1));
  bn1_ = register_module("bn1", nn::BatchNorm2d(channels));
  conv2_ = register_module("conv2", conv(channels, channels, 3, 1, 1));
  bn2_ = register_module("bn2", nn::BatchNorm2d(channels));
  if (stride != 1 || in_channels != channels) {
    downsample_ = register_module(
        "downsample",
        nn::Sequential(conv(in_channels, channels, 1, stride, 0), nn::BatchNorm2d(channels)));
  }
}

torch::Tensor BasicBlockImpl::forward(const torch::Tensor& x) {
  torch::Tensor out = torch::relu(bn1_(conv1_(x)));
  out = bn2_(conv2_(out));
  out += downsample_ ? downsample_->forward(x) : x;
  return torch::relu(out);
}

ResNetImpl::ResNetImpl(const std::vector<int>& blocks, std::int64_t in_channels,
                       std::int64_t num_classes) {
  conv1_ = register_module("conv1", conv(in_channels, 64, 7, 2, 3));
  bn1_ = register_module("bn1", nn::BatchNorm2d(64));
  maxpool_ =
      register_module("maxpool", nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)));
  layer1_ = register_module("layer1", make_layer(64, blocks.at(0), 1));
  layer2_ = register_module("layer2", make_layer(128, blocks.at(1), 2));
  layer3_ = register_module("layer3", make_layer(256, blocks.at(2), 2));
  layer4_ = register_module("layer4", make_layer(512, blocks.at(3), 2));
  fc_ = register_module("fc", nn::Linear(512, num_classes));

  // torchvision's initialisation; Linear keeps its default, as there.
  for (auto& module : modules(/*include_self=*/false)) {
    if (auto* c = module->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* b = module->as<nn::BatchNorm2d>()) {
      nn::init::ones_(b->weight);
      nn::init::zeros_(b->bias);
    }
  }
}

nn::Sequential ResNetImpl::make_layer(std::int64_t channels, int blocks, std::int64_t stride) {
  nn::Sequential layer;
  layer->push_back(BasicBlock(in_channels_, channels, stride));
  in_channels_ = channels;
  for (int i = 1; i < blocks; ++i) layer->push_back(BasicBlock(channels, channels, 1));
  return layer;
}

torch::Tensor ResNetImpl::forward(torch::Tensor x) {
  x = maxpool_(torch::relu(bn1_(conv1_(x))));
  x = layer4_->forward(layer3_->forward(layer2_->forward(layer1_->forward(x))));
  x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
  return fc_(x);
}

ResNet resnet18(std::int64_t in_channels, std::int64_t num_classes) {
  return ResNet(std::vector<int>{2, 2, 2, 2}, in_channels, num_classes);
}

}  // namespace fashion_mnist
