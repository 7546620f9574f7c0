#include "gradient_buckets.hpp"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

namespace trainrun::runtime::detail {

namespace {
constexpr std::size_t kFirstBucketBytes = 1024 * 1024;
}

std::vector<std::vector<std::size_t>> make_buckets(const std::vector<torch::Tensor>& tensors,
                                                   std::size_t cap_bytes,
                                                   std::size_t first_cap_bytes) {
  struct Open {
    std::vector<std::size_t> members;
    std::size_t bytes = 0;
    bool first = true;
  };
  std::map<std::tuple<int, int, int>, Open> open;
  std::vector<std::vector<std::size_t>> buckets;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    const auto key =
        std::make_tuple(static_cast<int>(t.scalar_type()), static_cast<int>(t.device().type()),
                        static_cast<int>(t.device().index()));
    const std::size_t bytes = static_cast<std::size_t>(t.numel()) * t.element_size();
    auto& bucket = open[key];
    const std::size_t cap = bucket.first ? first_cap_bytes : cap_bytes;
    if (!bucket.members.empty() && bucket.bytes + bytes > cap) {
      buckets.push_back(std::move(bucket.members));
      bucket.members.clear();
      bucket.bytes = 0;
      bucket.first = false;
    }
    bucket.members.push_back(i);
    bucket.bytes += bytes;
  }
  for (auto& [key, bucket] : open) {
    if (!bucket.members.empty()) buckets.push_back(std::move(bucket.members));
  }
  return buckets;
}

GradientBuckets::GradientBuckets(const std::vector<torch::Tensor>& params, std::size_t cap_bytes) {
  std::vector<torch::Tensor> reversed(params.rbegin(), params.rend());
  const auto groups =
      make_buckets(reversed, cap_bytes, std::min<std::size_t>(cap_bytes, kFirstBucketBytes));
  slots_.resize(params.size());
  for (std::size_t b = 0; b < groups.size(); ++b) {
    Bucket bucket;
    std::int64_t offset = 0;
    for (std::size_t r : groups[b]) {
      const std::size_t i = params.size() - 1 - r;
      slots_[i] = {b, offset, params[i].sizes().vec()};
      offset += params[i].numel();
    }
    bucket.size = groups[b].size();
    bucket.flat = torch::empty({offset}, reversed[groups[b].front()].options());
    buckets_.push_back(std::move(bucket));
  }
  ready_.assign(params.size(), false);
}

torch::Tensor GradientBuckets::slot(std::size_t i) const {
  const Slot& s = slots_[i];
  std::int64_t numel = 1;
  for (std::int64_t d : s.sizes) numel *= d;
  return buckets_[s.bucket].flat.narrow(0, s.offset, numel).view(s.sizes);
}

void GradientBuckets::mark_ready(std::size_t i, const torch::Tensor& grad) {
  torch::NoGradGuard no_grad;
  if (grad.defined()) {
    slot(i).copy_(grad);
  } else {
    slot(i).zero_();
  }
  ready_[i] = true;
  ++buckets_[slots_[i].bucket].ready;
}

void GradientBuckets::start_ready(const Start& start) {
  while (next_start_ < buckets_.size() &&
         buckets_[next_start_].ready == buckets_[next_start_].size) {
    std::vector<torch::Tensor> flat = {buckets_[next_start_].flat};
    buckets_[next_start_].work = start(flat);
    ++next_start_;
  }
}

std::vector<GradientBuckets::Work> GradientBuckets::started() const {
  std::vector<Work> works;
  for (const auto& bucket : buckets_) {
    if (bucket.work) works.push_back(bucket.work);
  }
  return works;
}

void GradientBuckets::divide(int world_size) {
  for (auto& bucket : buckets_) bucket.flat.div_(world_size);
}

void GradientBuckets::reset() {
  next_start_ = 0;
  std::fill(ready_.begin(), ready_.end(), false);
  for (auto& bucket : buckets_) {
    bucket.ready = 0;
    bucket.work.reset();
  }
}

}  // namespace trainrun::runtime::detail
