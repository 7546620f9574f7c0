#include "trainrun/launch/rollcall/worker_diagnosis.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace trainrun::launch {

namespace {

using Clock = std::chrono::steady_clock;

// Waits until `fd` is ready for `events` or the deadline passes; false then (or on an error).
bool wait_for(int fd, short events, Clock::time_point deadline) {
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

// Reads `size` bytes by the deadline; the error's words when it cannot.
std::string read_by(int fd, char* data, std::size_t size, Clock::time_point deadline) {
  std::size_t got = 0;
  while (got < size) {
    if (!wait_for(fd, POLLIN, deadline)) return "no answer in time";
    const ssize_t n = ::recv(fd, data + got, size - got, MSG_DONTWAIT);
    if (n == 0) return "the worker closed its channel";
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return std::strerror(errno);
    }
    got += static_cast<std::size_t>(n);
  }
  return "";
}

}  // namespace

Diagnosis ask_diagnosis(int agent_fd, std::chrono::milliseconds timeout, std::size_t max_bytes) {
  const auto deadline = Clock::now() + timeout;
  // An answer to an earlier request that came after its deadline is dropped first.
  char stale[4096];
  while (Clock::now() < deadline && ::recv(agent_fd, stale, sizeof stale, MSG_DONTWAIT) > 0) {
  }
  if (!wait_for(agent_fd, POLLOUT, deadline) ||
      ::send(agent_fd, "?", 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1)
    return {nullptr, "the worker's channel cannot be written"};
  unsigned char header[4];
  std::string error = read_by(agent_fd, reinterpret_cast<char*>(header), sizeof header, deadline);
  if (!error.empty()) return {nullptr, error};
  const std::uint32_t size = std::uint32_t{header[0]} | std::uint32_t{header[1]} << 8 |
                             std::uint32_t{header[2]} << 16 | std::uint32_t{header[3]} << 24;
  if (size > max_bytes)
    return {nullptr,
            fmt::format("its answer ({} bytes) is larger than the {} read", size, max_bytes)};
  std::string body(size, '\0');
  error = read_by(agent_fd, body.data(), size, deadline);
  if (!error.empty()) return {nullptr, error};
  nlohmann::json reply = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (reply.is_discarded() || !reply.is_object())
    return {nullptr, "its answer is not a JSON object"};
  return {std::move(reply), ""};
}

}  // namespace trainrun::launch
