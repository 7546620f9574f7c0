#include "session.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <trainrun/base/files.hpp>
#include <trainrun/runtime/errors.hpp>
#include <trainrun/runtime/report.hpp>
#include <utility>

namespace trainrun::runtime {
namespace detail {
namespace {

std::recursive_mutex session_mutex;
std::unique_ptr<Session> session;
bool session_explicit = false;

// fit() calls in this process: every rank makes the same number, so it names keys in the store.
int session_serial = 0;

std::string checkpoint_key(int serial, long reports) {
  return "trainrun/checkpoint/" + std::to_string(serial) + "/" + std::to_string(reports);
}

std::unique_ptr<Session> make_session(const SessionOptions& options) {
  const auto env = current_environment();
  const LaunchEnv launch = parse_launch_env(env);
  const std::string name = resolve_experiment_name(options.run, launch, env, program_name(),
                                                   std::time(nullptr), ::getpid());
  const auto run_dir = resolve_storage_path(options.run, env) / name;
  return std::make_unique<Session>(options, launch, name, run_dir);
}

}  // namespace

Session::Session(SessionOptions options, const LaunchEnv& launch,
                 const std::string& experiment_name, std::filesystem::path run_dir)
    : options_(std::move(options)),
      context_(launch, experiment_name, options_.use_gpu),
      run_dir_(std::move(run_dir)) {}

RunStorage& Session::storage() {
  if (!storage_) storage_ = std::make_unique<RunStorage>(run_dir_, options_.run.checkpoint_config);
  return *storage_;
}

std::optional<Checkpoint> Session::latest_checkpoint() {
  if (context_.world_rank() == 0) return storage().latest_checkpoint();
  if (!sharing_checkpoints_) return find_latest_checkpoint(run_dir_);
  const std::string chosen =
      share_from_rank0(context_.world_rank(), checkpoint_key(serial_, reports_), "");
  if (chosen.empty()) return std::nullopt;
  if (!std::filesystem::is_directory(chosen)) {
    throw RuntimeError("rank 0 resumes from " + chosen + ", which rank " +
                       std::to_string(context_.world_rank()) +
                       " cannot see; several nodes need the storage path on a shared file "
                       "system (RunConfig::storage_path, TRAINRUN_STORAGE_PATH)");
  }
  return Checkpoint::from_directory(chosen);
}

void Session::adopt_rank0_run_dir(int serial) {
  serial_ = serial;
  if (!context_.launched()) return;
  const std::filesystem::path chosen(share_from_rank0(
      context_.world_rank(), "trainrun/run_dir/" + std::to_string(serial), run_dir_.string()));
  if (chosen == run_dir_) return;
  run_dir_ = chosen;
  context_ = TrainContext(context_.launch_env(), chosen.filename().string(), options_.use_gpu);
}

void Session::start_sharing_checkpoints() {
  if (!context_.launched()) return;
  sharing_checkpoints_ = true;
  publish_checkpoint();
}

void Session::publish_checkpoint() {
  if (!sharing_checkpoints_ || context_.world_rank() != 0) return;
  const auto latest = storage().latest_checkpoint();
  share_from_rank0(0, checkpoint_key(serial_, reports_), latest ? latest->path().string() : "");
}

Session& current_session() {
  std::lock_guard<std::recursive_mutex> lock(session_mutex);
  if (!session) {
    auto fresh = make_session(SessionOptions{});
    prepare_device(fresh->context());
    if (fresh->context().launched()) {
      start_process_group(fresh->context(), fresh->options().torch.timeout);
    }
    session = std::move(fresh);
    session_explicit = false;
  }
  return *session;
}

Session& begin_session(const SessionOptions& options) {
  std::lock_guard<std::recursive_mutex> lock(session_mutex);
  if (session && session_explicit) {
    throw RuntimeError(
        "TorchTrainer::fit: another fit() is already running in this process; "
        "run trainers one after the other");
  }
  auto fresh = make_session(options);
  prepare_device(fresh->context());
  if (session) {
    // Started implicitly by an earlier get_context(): keep its process group when it fits.
    if (session->options().use_gpu != options.use_gpu && process_group_started()) {
      throw ConfigError(
          "TorchTrainer::fit: ScalingConfig::use_gpu differs from the process "
          "group already started by get_context(); create the trainer first");
    }
    session = std::move(fresh);
  } else {
    session = std::move(fresh);
    if (session->context().launched()) {
      try {
        start_process_group(session->context(), options.torch.timeout);
      } catch (...) {
        session.reset();
        throw;
      }
    }
  }
  session_explicit = true;
  session->adopt_rank0_run_dir(++session_serial);
  // Rank 0 opens the run directory now: this repairs a save cut short by a crash before any
  // rank asks for the checkpoint to resume from, and refuses a directory another run has open.
  if (session->context().world_rank() == 0) session->storage();
  session->start_sharing_checkpoints();
  // ...and no rank looks for that checkpoint until the repair is done.
  barrier();
  return *session;
}

void end_session() {
  std::lock_guard<std::recursive_mutex> lock(session_mutex);
  clear_gradient_synchronizers();
  stop_process_group();
  session.reset();
  session_explicit = false;
}

bool session_active() {
  std::lock_guard<std::recursive_mutex> lock(session_mutex);
  return session != nullptr;
}

void record_first_report() {
  // trainrun's start-up record takes a rank's first report as its first step: the time is left in
  // the rank's log directory, beside its error file, where the agent reads it (docs/cli.md,
  // "Start-up"). Under another launcher the file is one more in that directory; without one,
  // there is no directory and nothing is written. Written whole, or not at all.
  const char* error_file = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (!error_file || !*error_file) return;
  const std::string path = std::string(error_file);
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return;
  const std::string file = path.substr(0, slash) + "/first_report";
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  char text[64];
  const int n = std::snprintf(text, sizeof text, "%lld.%09ld\n", static_cast<long long>(now.tv_sec),
                              now.tv_nsec);
  const std::string temporary = file + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const bool written = n > 0 && ::write(fd, text, static_cast<std::size_t>(n)) == n;
  ::close(fd);
  if (!written || ::rename(temporary.c_str(), file.c_str()) != 0) ::unlink(temporary.c_str());
}

std::string program_name() {
  const std::string exe = self_exe();
  if (exe.empty()) return "trainrun";
  return std::filesystem::path(exe).filename().string();
}

}  // namespace detail

const TrainContext& get_context() { return detail::current_session().context(); }

void shutdown() {
  if (!detail::session_active()) return;
  detail::barrier();
  detail::end_session();
}

void report(const Metrics& metrics, const std::optional<Checkpoint>& checkpoint) {
  // trainrun --hang-timeout counts a report as progress: it reads this file's modification time.
  if (const char* heartbeat = std::getenv("TRAINRUN_HEARTBEAT_FILE"); heartbeat && *heartbeat)
    ::utimensat(AT_FDCWD, heartbeat, nullptr, 0);
  auto& session = detail::current_session();
  if (session.reports() == 0) detail::record_first_report();
  std::exception_ptr failure;
  if (session.context().world_rank() == 0) {
    try {
      session.storage().record(metrics, checkpoint);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  session.count_report();
  if (!failure) {
    try {
      session.publish_checkpoint();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  // Other ranks wait for rank 0's save, so get_checkpoint() agrees everywhere afterwards.
  detail::barrier();
  if (failure) std::rethrow_exception(failure);
}

std::optional<Checkpoint> get_checkpoint() { return detail::current_session().latest_checkpoint(); }

}  // namespace trainrun::runtime
