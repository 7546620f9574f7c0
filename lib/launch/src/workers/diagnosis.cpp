#include "trainrun/launch/workers/diagnosis.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "python_bootstrap.hpp"

namespace trainrun::launch {

std::optional<DiagnosisChannel> open_diagnosis_channel() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return std::nullopt;
  // Above the standard streams, whichever of ours is closed: the worker's end must not be
  // taken for one of them.
  for (int& fd : fds) {
    if (fd > 2) continue;
    const int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    ::close(fd);
    fd = high;
  }
  if (fds[0] < 0 || fds[1] < 0) {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
    return std::nullopt;
  }
  return DiagnosisChannel{fds[0], fds[1]};
}

SpawnRequest with_diagnosis_bootstrap(SpawnRequest request, int worker_fd,
                                      const std::string& bootstrap_dir) {
  if (!request.env) return request;  // a worker's request names its whole environment
  request.env =
      bootstrap_environment(std::move(*request.env), bootstrap_dir, {{"diagnosis", worker_fd}});
  request.kept_fd = worker_fd;
  return request;
}

std::optional<ScriptReturn> parse_script_return(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  const auto how = j.find("returned");
  const auto code = j.find("code");
  if (how == j.end() || !how->is_string() || code == j.end() || !code->is_number_integer())
    return std::nullopt;
  const std::string name = how->get<std::string>();
  const long long value = code->get<long long>();
  if ((name != "returned" && name != "exit" && name != "exception") || value < 0 || value > 255)
    return std::nullopt;
  return ScriptReturn{name, static_cast<int>(value)};
}

}  // namespace trainrun::launch
