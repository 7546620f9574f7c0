#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <system_error>
#include <trainrun/base/files.hpp>
#include <trainrun/runtime/errors.hpp>
#include <trainrun/runtime/run_storage.hpp>
#include <utility>

namespace trainrun::runtime {
namespace fs = std::filesystem;
namespace {

constexpr const char* kCheckpointPrefix = "checkpoint_";
constexpr const char* kTempPrefix = ".tmp_";

std::string errno_text() { return std::strerror(errno); }

// The metrics a checkpoint was saved with, inside it (the rename that persisted it committed
// both); null where they cannot be read.
Metrics saved_metrics(const fs::path& checkpoint) {
  const std::string text =
      read_file((checkpoint / RunStorage::checkpoint_metrics_file_name).string()).value_or("");
  Metrics line = Metrics::parse(text, nullptr, false);
  return !line.is_discarded() && line.is_object() ? line : Metrics();
}

// The user's metrics may hold any bytes (a label read from a file): what is not UTF-8 is written
// as U+FFFD, so report() does not fail on it halfway through a save.
std::string metrics_text(const Metrics& metrics) {
  return metrics.dump(-1, ' ', false, Metrics::error_handler_t::replace);
}

// A checkpoint_NNNNNN directory's index, or -1 for any other name.
int checkpoint_index(const fs::path& path) {
  const std::string name = path.filename().string();
  const std::string prefix = kCheckpointPrefix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
  const std::string digits = name.substr(prefix.size());
  if (digits.size() > 9 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return -1;
  }
  return std::stoi(digits);
}

std::string checkpoint_name(int index) {
  std::string digits = std::to_string(index);
  if (digits.size() < 6) digits.insert(0, 6 - digits.size(), '0');
  return kCheckpointPrefix + digits;
}

void fsync_path(const fs::path& path, bool directory) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0) throw RuntimeError("cannot open " + path.string() + " to sync it: " + errno_text());
  const int result = ::fsync(fd);
  const std::string reason = result != 0 ? errno_text() : "";
  ::close(fd);
  if (result != 0) throw RuntimeError("cannot sync " + path.string() + ": " + reason);
}

void fsync_tree(const fs::path& root) {
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.is_symlink()) continue;
    if (entry.is_directory()) {
      fsync_path(entry.path(), true);
    } else if (entry.is_regular_file()) {
      fsync_path(entry.path(), false);
    }
  }
  fsync_path(root, true);
}

// Moves a directory out of the checkpoint_* namespace before deleting it, so a crash in the
// middle of the delete never leaves a half-deleted directory that looks like a checkpoint.
void remove_directory(const fs::path& run_dir, const fs::path& path) {
  const fs::path doomed = run_dir / (std::string(kTempPrefix) + "delete_" +
                                     path.filename().string() + "_" + std::to_string(::getpid()));
  std::error_code error;
  fs::rename(path, doomed, error);
  fs::remove_all(error ? path : doomed, error);
}

std::vector<std::pair<int, fs::path>> scan_checkpoints(const fs::path& run_dir) {
  std::vector<std::pair<int, fs::path>> found;
  std::error_code error;
  for (fs::directory_iterator it(run_dir, error), end; !error && it != end; it.increment(error)) {
    const int index = checkpoint_index(it->path());
    if (index >= 0 && it->is_directory()) found.emplace_back(index, it->path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::string sanitize_name_part(const std::string& text) {
  std::string out = text;
  for (char& c : out) {
    const bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '_' || c == '.';
    if (!safe) c = '_';
  }
  return out;
}

std::string local_timestamp(std::time_t now) {
  std::tm parts{};
  localtime_r(&now, &parts);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d_%H-%M-%S", &parts);
  return text;
}

// A metric's value as a score; NaN and infinities rank as no score, the worst: a diverged loss is
// never "best", and NaN's comparisons would break the ordering the pruning sort needs.
std::optional<double> score_in(const Metrics& metrics, const CheckpointConfig& config) {
  if (config.checkpoint_score_attribute.empty() || !metrics.is_object()) return std::nullopt;
  const auto value = metrics.find(config.checkpoint_score_attribute);
  if (value == metrics.end() || !value->is_number()) return std::nullopt;
  const double score = value->get<double>();
  if (!std::isfinite(score)) return std::nullopt;
  return score;
}

// Whether checkpoint a (its index and score) ranks before b: by score when configured (those
// without a score last), newest on ties.
bool ranks_before(int index_a, const std::optional<double>& score_a, int index_b,
                  const std::optional<double>& score_b, const CheckpointConfig& config) {
  if (!config.checkpoint_score_attribute.empty()) {
    if (score_a.has_value() != score_b.has_value()) return score_a.has_value();
    if (score_a && *score_a != *score_b) {
      return config.checkpoint_score_order == ScoreOrder::max ? *score_a > *score_b
                                                              : *score_a < *score_b;
    }
  }
  return index_a > index_b;
}

// Locks <run_dir>/.trainrun.lock for this process (a POSIX record lock: released when the
// process ends, however it ends), or says which process holds it.
int lock_run_dir(const fs::path& run_dir) {
  const fs::path path = run_dir / ".trainrun.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw RuntimeError("cannot open " + path.string() + ": " + errno_text() +
                       "; set RunConfig::storage_path to a writable place");
  }
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  if (::fcntl(fd, F_SETLK, &lock) == 0) return fd;
  struct flock holder {};
  holder.l_type = F_WRLCK;
  holder.l_whence = SEEK_SET;
  const bool known = ::fcntl(fd, F_GETLK, &holder) == 0 && holder.l_type != F_UNLCK;
  ::close(fd);
  throw ConfigError("the run directory " + run_dir.string() + " is in use by another run" +
                    (known ? " (process " + std::to_string(holder.l_pid) + ")" : "") +
                    "; two runs must not share one: give this one another RunConfig::name or "
                    "TRAINRUN_EXPERIMENT_NAME");
}

}  // namespace

RunStorage::~RunStorage() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

RunStorage::RunStorage(fs::path run_dir, CheckpointConfig config)
    : run_dir_(std::move(run_dir)), config_(std::move(config)) {
  if (config_.num_to_keep && *config_.num_to_keep < 1) {
    throw ConfigError("CheckpointConfig::num_to_keep must be at least 1 (got " +
                      std::to_string(*config_.num_to_keep) + "); leave it empty to keep all");
  }
  std::error_code error;
  fs::create_directories(run_dir_, error);
  if (error || !fs::is_directory(run_dir_)) {
    throw RuntimeError("cannot create the run directory " + run_dir_.string() + ": " +
                       (error ? error.message() : "not a directory") +
                       "; set RunConfig::storage_path to a writable place");
  }
  // Before anything is cleaned or renumbered: another live run's files are not ours to touch.
  lock_fd_ = lock_run_dir(run_dir_);
  for (fs::directory_iterator it(run_dir_, error), end; !error && it != end; it.increment(error)) {
    if (it->path().filename().string().rfind(kTempPrefix, 0) == 0) {
      std::error_code ignored;
      fs::remove_all(it->path(), ignored);
    }
  }

  std::map<std::string, Metrics> metrics_by_checkpoint;
  const fs::path metrics_path = run_dir_ / metrics_file_name;
  if (std::optional<std::string> read = read_file(metrics_path.string())) {
    std::string& content = *read;
    // A crash while appending can leave a partial last line: cut it so the next line starts clean.
    const auto last_newline = content.rfind('\n');
    const std::size_t complete = last_newline == std::string::npos ? 0 : last_newline + 1;
    if (complete != content.size()) {
      fs::resize_file(metrics_path, complete, error);
      content.resize(complete);
    }
    std::istringstream lines(content);
    std::string line;
    while (std::getline(lines, line)) {
      const Metrics parsed = Metrics::parse(line, nullptr, false);
      if (parsed.is_discarded() || !parsed.is_object()) continue;
      ++iterations_;
      last_metrics_ = parsed;
      const auto dir_name = parsed.find("checkpoint_dir_name");
      if (dir_name != parsed.end() && dir_name->is_string()) {
        metrics_by_checkpoint[dir_name->get<std::string>()] = parsed;
      }
    }
  }
  for (const auto& [index, path] : scan_checkpoints(run_dir_)) {
    auto metrics = metrics_by_checkpoint.find(path.filename().string());
    if (metrics == metrics_by_checkpoint.end()) {
      // Saved, then stopped before its metrics line was written: write it now.
      const Metrics line = saved_metrics(path);
      if (line.is_object()) {
        append_metrics_line(line);
        metrics = metrics_by_checkpoint.emplace(path.filename().string(), line).first;
      }
    }
    entries_.push_back(
        Entry{index, path,
              metrics == metrics_by_checkpoint.end() ? std::nullopt : score_of(metrics->second)});
    next_index_ = index + 1;
  }
}

std::optional<double> RunStorage::score_of(const Metrics& metrics) const {
  return score_in(metrics, config_);
}

std::optional<Checkpoint> RunStorage::record(const Metrics& metrics,
                                             const std::optional<Checkpoint>& checkpoint) {
  if (!metrics.is_object() && !metrics.is_null()) {
    throw ConfigError("report: metrics must be a JSON object of name to value, got " +
                      metrics_text(metrics));
  }
  const std::string name = checkpoint_name(next_index_);
  Metrics line = metrics.is_null() ? Metrics::object() : metrics;
  if (!line.contains("training_iteration")) line["training_iteration"] = iterations_ + 1;
  if (!line.contains("timestamp")) {
    line["timestamp"] =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  line["checkpoint_dir_name"] = checkpoint ? Metrics(name) : Metrics(nullptr);

  std::optional<Checkpoint> persisted;
  if (checkpoint) {
    const fs::path source = checkpoint->path();
    if (!fs::is_directory(source)) {
      throw ConfigError("report: checkpoint directory " + source.string() +
                        " does not exist or is not a directory");
    }
    const fs::path temp =
        run_dir_ / (std::string(kTempPrefix) + name + "_" + std::to_string(::getpid()));
    const fs::path target = run_dir_ / name;
    std::error_code error;
    fs::remove_all(temp, error);
    fs::copy(source, temp, fs::copy_options::recursive | fs::copy_options::copy_symlinks, error);
    if (!error) {
      // The metrics travel inside the checkpoint, so the rename below commits both at once:
      // a crash before the metrics line is appended is repaired when the run is reopened.
      std::ofstream(temp / checkpoint_metrics_file_name) << metrics_text(line) << "\n";
    }
    if (error) {
      fs::remove_all(temp, error);
      throw RuntimeError("report: cannot copy checkpoint " + source.string() + " to " +
                         temp.string() + ": " + error.message());
    }
    fsync_tree(temp);
    if (::rename(temp.c_str(), target.c_str()) != 0) {
      const std::string reason = errno_text();
      fs::remove_all(temp, error);
      throw RuntimeError("report: cannot move checkpoint into place at " + target.string() + ": " +
                         reason);
    }
    fsync_path(run_dir_, true);
    entries_.push_back(Entry{next_index_, target, score_of(metrics)});
    ++next_index_;
    persisted = Checkpoint::from_directory(target);
  }
  append_metrics_line(line);
  prune();
  return persisted;
}

void RunStorage::append_metrics_line(const Metrics& line) {
  const std::string text = metrics_text(line) + "\n";
  const fs::path metrics_path = run_dir_ / metrics_file_name;
  const int fd = ::open(metrics_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw RuntimeError("report: cannot open " + metrics_path.string() + ": " + errno_text());
  }
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string reason = errno_text();
      ::close(fd);
      throw RuntimeError("report: cannot write " + metrics_path.string() + ": " + reason);
    }
    written += static_cast<std::size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  ++iterations_;
  last_metrics_ = line;
}

void RunStorage::prune() {
  if (!config_.num_to_keep || entries_.size() <= static_cast<std::size_t>(*config_.num_to_keep)) {
    return;
  }
  std::vector<std::size_t> ranked(entries_.size());
  for (std::size_t i = 0; i < ranked.size(); ++i) ranked[i] = i;
  std::stable_sort(ranked.begin(), ranked.end(), [&](std::size_t a, std::size_t b) {
    return ranks_before(entries_[a].index, entries_[a].score, entries_[b].index, entries_[b].score,
                        config_);
  });
  std::vector<bool> keep(entries_.size(), false);
  for (int i = 0; i < *config_.num_to_keep; ++i) keep[ranked[static_cast<std::size_t>(i)]] = true;
  keep.back() = true;  // the newest stays, so a restarted job resumes from where it stopped
  std::vector<Entry> kept;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (keep[i]) {
      kept.push_back(entries_[i]);
    } else {
      remove_directory(run_dir_, entries_[i].path);
    }
  }
  entries_ = std::move(kept);
}

std::optional<Checkpoint> RunStorage::latest_checkpoint() const {
  if (entries_.empty()) return std::nullopt;
  return Checkpoint::from_directory(entries_.back().path);
}

std::vector<Checkpoint> RunStorage::checkpoints() const {
  std::vector<Checkpoint> out;
  for (const auto& entry : entries_) out.push_back(Checkpoint::from_directory(entry.path));
  return out;
}

std::optional<Checkpoint> find_latest_checkpoint(const fs::path& run_dir) {
  const auto found = scan_checkpoints(run_dir);
  if (found.empty()) return std::nullopt;
  return Checkpoint::from_directory(found.back().second);
}

Metrics read_last_metrics(const fs::path& run_dir) {
  auto history = read_metrics_history(run_dir);
  return history.empty() ? Metrics() : std::move(history.back());
}

std::vector<Metrics> read_metrics_history(const fs::path& run_dir) {
  std::istringstream in(
      read_file((run_dir / RunStorage::metrics_file_name).string()).value_or(""));
  std::vector<Metrics> history;
  std::string line;
  while (std::getline(in, line)) {
    Metrics parsed = Metrics::parse(line, nullptr, false);
    if (!parsed.is_discarded() && parsed.is_object()) history.push_back(std::move(parsed));
  }
  return history;
}

std::vector<std::pair<Checkpoint, Metrics>> read_best_checkpoints(const fs::path& run_dir,
                                                                  const CheckpointConfig& config) {
  std::map<std::string, Metrics> metrics_by_name;
  for (auto& line : read_metrics_history(run_dir)) {
    const auto name = line.find("checkpoint_dir_name");
    if (name != line.end() && name->is_string()) {
      const std::string key = name->get<std::string>();
      metrics_by_name[key] = std::move(line);
    }
  }
  struct Found {
    int index;
    fs::path path;
    Metrics metrics;
    std::optional<double> score;
  };
  std::vector<Found> found;
  for (const auto& [index, path] : scan_checkpoints(run_dir)) {
    // A checkpoint saved by a job that stopped before its metrics line was written (the next
    // start of the run writes it) holds its metrics itself.
    const auto named = metrics_by_name.find(path.filename().string());
    Metrics metrics = named != metrics_by_name.end() ? named->second : saved_metrics(path);
    const auto score = score_in(metrics, config);
    found.push_back({index, path, std::move(metrics), score});
  }
  std::stable_sort(found.begin(), found.end(), [&](const Found& a, const Found& b) {
    return ranks_before(a.index, a.score, b.index, b.score, config);
  });
  std::vector<std::pair<Checkpoint, Metrics>> best;
  for (auto& f : found) best.emplace_back(Checkpoint::from_directory(f.path), std::move(f.metrics));
  return best;
}

namespace {

// The launcher's log directory of this job, from TORCHELASTIC_ERROR_FILE
// (<dir>/attempt_<n>/<local rank>/error.json under torchrun and trainrun): the same on every
// restart of one launcher, different for each launcher started.
std::string launcher_log_dir_name(const std::string& error_file) {
  const fs::path path(error_file);
  const fs::path attempt = path.parent_path().parent_path();
  if (path.filename() != "error.json" || attempt.filename().string().rfind("attempt_", 0) != 0) {
    return "";
  }
  return attempt.parent_path().filename().string();
}

}  // namespace

std::string resolve_experiment_name(const RunConfig& config, const LaunchEnv& launch,
                                    const std::map<std::string, std::string>& env,
                                    const std::string& program, std::time_t now, long pid) {
  std::string name = config.name;
  const char* origin = "RunConfig::name";
  if (name.empty()) {
    if (const auto it = env.find("TRAINRUN_EXPERIMENT_NAME"); it != env.end()) {
      name = it->second;
      origin = "TRAINRUN_EXPERIMENT_NAME";
    }
  }
  if (!name.empty()) {
    if (name == "." || name == ".." || name.find('/') != std::string::npos) {
      throw ConfigError(std::string(origin) + "=" + name +
                        ": an experiment name must be a single directory name (no '/')");
    }
    return name;
  }
  const std::string prefix = sanitize_name_part(program.empty() ? "trainrun" : program);
  if (launch.launched) {
    if (!launch.run_id.empty() && launch.run_id != "none") {
      return prefix + "_" + sanitize_name_part(launch.run_id);
    }
    // Without a run id, a dynamic rendezvous (c10d) picks a new MASTER_PORT on every restart;
    // the launcher's log directory stays. A static one keeps MASTER_ADDR:MASTER_PORT.
    const std::string log_dir = launcher_log_dir_name(launch.error_file);
    if (!launch.use_agent_store && !log_dir.empty()) {
      return prefix + "_" + sanitize_name_part(log_dir);
    }
    return prefix + "_" + sanitize_name_part(launch.master_addr) + "_" +
           std::to_string(launch.master_port);
  }
  // The process id keeps two runs started in the same second apart.
  const std::string local = prefix + "_" + local_timestamp(now);
  return pid > 0 ? local + "_" + std::to_string(pid) : local;
}

fs::path resolve_storage_path(const RunConfig& config,
                              const std::map<std::string, std::string>& env) {
  if (!config.storage_path.empty()) return config.storage_path;
  if (const auto it = env.find("TRAINRUN_STORAGE_PATH"); it != env.end() && !it->second.empty()) {
    return it->second;
  }
  if (const auto it = env.find("HOME"); it != env.end() && !it->second.empty()) {
    return fs::path(it->second) / "trainrun_results";
  }
  throw ConfigError(
      "no storage path: HOME is not set; set RunConfig::storage_path or "
      "TRAINRUN_STORAGE_PATH");
}

}  // namespace trainrun::runtime
