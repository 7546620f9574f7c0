#include "trainrun/launch/workers/diagnosis.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "template_bootstrap.hpp"
#include "trainrun/launch/core/file_io.hpp"
#include "trainrun/launch/workers/entrypoint.hpp"

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

SpawnRequest with_diagnosis_bootstrap(SpawnRequest request, int worker_fd) {
  const std::size_t end = python_options_end(request.argv);
  if (end >= request.argv.size()) return request;
  request.argv.insert(request.argv.begin() + static_cast<std::ptrdiff_t>(end),
                      {"-c", kDiagnosisLoader, std::to_string(worker_fd),
                       std::to_string(diagnosis_bootstrap().size())});
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

bool send_diagnosis_bootstrap(int agent_fd) {
  // The socket's buffer (hundreds of KiB) holds the program whole: this never waits.
  return write_all(agent_fd, diagnosis_bootstrap().data(), diagnosis_bootstrap().size());
}

}  // namespace trainrun::launch
