// The gradient buckets' layout and their order within a pass, on CPU tensors, without a process
// group.
#include "gradient_buckets.hpp"

#include <catch2/catch.hpp>

using trainrun::runtime::detail::GradientBuckets;

namespace {

// Three float parameters of 1 KiB each, then one of 2 MiB: in reverse order, the big one fills
// the small first bucket (1 MiB cap) on its own; the three others share the next.
std::vector<torch::Tensor> model() {
  return {torch::zeros({16, 16}), torch::zeros({256}), torch::zeros({8, 32}),
          torch::zeros({512, 1024})};
}

}  // namespace

TEST_CASE("gradient buckets: reverse parameter order, a small first bucket", "[runtime]") {
  const auto params = model();
  GradientBuckets buckets(params, 25 * 1024 * 1024);
  REQUIRE(buckets.buckets() == 2);
  CHECK(buckets.bucket_of(3) == 0);
  CHECK(buckets.bucket_of(0) == 1);
  CHECK(buckets.bucket_of(2) == 1);
  CHECK(buckets.flat(1).numel() == 256 * 3);
  // A parameter's slot is shaped as it is, and is the bucket's memory.
  CHECK(buckets.slot(0).sizes() == params[0].sizes());
  buckets.slot(2).fill_(7);
  CHECK(buckets.flat(1).narrow(0, 0, 256).sum().item<float>() == 7 * 256);
}

TEST_CASE("gradient buckets: started in order, each once its gradients are all in", "[runtime]") {
  const auto params = model();
  GradientBuckets buckets(params, 25 * 1024 * 1024);
  std::vector<const void*> started;
  const GradientBuckets::Start start = [&](std::vector<torch::Tensor>& flat) {
    started.push_back(flat[0].data_ptr());
    return GradientBuckets::Work();
  };
  // The second bucket full first: it waits for the first.
  for (std::size_t i = 0; i < 3; ++i) buckets.mark_ready(i, torch::ones_like(params[i]));
  buckets.start_ready(start);
  CHECK(started.empty());
  CHECK_FALSE(buckets.ready(3));
  buckets.mark_ready(3, torch::Tensor());  // no gradient this pass: zeros
  CHECK(buckets.ready(3));
  buckets.start_ready(start);
  CHECK(started ==
        std::vector<const void*>{buckets.flat(0).data_ptr(), buckets.flat(1).data_ptr()});
  CHECK(buckets.slot(3).abs().sum().item<float>() == 0);
  buckets.divide(4);
  CHECK(buckets.slot(1).sum().item<float>() == 256 / 4.0f);

  // A new pass starts nothing before its gradients are in again.
  buckets.reset();
  CHECK_FALSE(buckets.ready(0));
  buckets.start_ready(start);
  CHECK(started.size() == 2);
}
