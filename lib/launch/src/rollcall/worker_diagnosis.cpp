#include "worker_diagnosis.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

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

}  // namespace

Diagnosis ask_diagnosis(int agent_fd, std::chrono::milliseconds timeout, std::size_t max_bytes) {
  static std::atomic<unsigned long> requests{0};
  const std::string id = std::to_string(++requests);
  const std::string request = id + "\n";
  const std::string ours = id + " ";
  const auto deadline = Clock::now() + timeout;
  if (!wait_for(agent_fd, POLLOUT, deadline) ||
      ::send(agent_fd, request.data(), request.size(), MSG_DONTWAIT | MSG_NOSIGNAL) !=
          static_cast<ssize_t>(request.size()))
    return {nullptr, "the worker's channel cannot be written"};
  // Lines come whole or in pieces; a line of an earlier request (given up on, or cut short
  // here for its size) is skipped to its end.
  std::string pending;
  bool skipping = false;
  char chunk[65536];
  while (true) {
    std::size_t end;
    while ((end = pending.find('\n')) != std::string::npos) {
      const bool skipped = std::exchange(skipping, false);
      if (!skipped && pending.compare(0, ours.size(), ours) == 0) {
        if (end - ours.size() > max_bytes)
          return {nullptr, fmt::format("its answer is larger than the {} bytes read", max_bytes)};
        nlohmann::json reply = nlohmann::json::parse(
            pending.begin() + static_cast<long>(ours.size()),
            pending.begin() + static_cast<long>(end), nullptr, /*allow_exceptions=*/false);
        if (reply.is_discarded() || !reply.is_object())
          return {nullptr, "its answer is not a JSON object"};
        return {std::move(reply), ""};
      }
      pending.erase(0, end + 1);
    }
    if (skipping) pending.clear();
    if (pending.size() > max_bytes) {
      if (pending.compare(0, ours.size(), ours) == 0)
        return {nullptr, fmt::format("its answer is larger than the {} bytes read", max_bytes)};
      pending.clear();
      skipping = true;
    }
    if (!wait_for(agent_fd, POLLIN, deadline)) return {nullptr, "no answer in time"};
    const ssize_t n = ::recv(agent_fd, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n == 0) return {nullptr, "the worker closed its channel"};
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return {nullptr, std::strerror(errno)};
    }
    pending.append(chunk, static_cast<std::size_t>(n));
  }
}

}  // namespace trainrun::launch
