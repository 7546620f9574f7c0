#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace trainrun::runtime {

// A directory of files that make up one checkpoint (model.pt, optimizer.pt, anything).
class Checkpoint {
 public:
  // Refers to `directory`; report() checks that it exists when it is persisted.
  static Checkpoint from_directory(std::filesystem::path directory);

  const std::filesystem::path& path() const { return path_; }
  // Copies the checkpoint's files into `destination` (created when missing) and returns it.
  std::filesystem::path to_directory(const std::filesystem::path& destination) const;

  bool operator==(const Checkpoint& other) const { return path_ == other.path_; }

 private:
  explicit Checkpoint(std::filesystem::path path) : path_(std::move(path)) {}
  std::filesystem::path path_;
};

enum class ScoreOrder { max, min };

struct CheckpointConfig {
  // How many persisted checkpoints to keep; empty keeps all. The most recent one is always kept,
  // so a restarted job can resume from it.
  std::optional<int> num_to_keep;
  // With a metric name, the checkpoints kept are the best by that metric; otherwise the newest.
  std::string checkpoint_score_attribute;
  ScoreOrder checkpoint_score_order = ScoreOrder::max;
};

}  // namespace trainrun::runtime
