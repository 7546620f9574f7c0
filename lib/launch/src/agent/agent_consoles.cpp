#include "agent_consoles.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/steady_timer.hpp>
#include <functional>

#include "trainrun/base/wording.hpp"
#include "trainrun/launch/core/failure.hpp"

namespace trainrun::launch {

namespace asio = boost::asio;

AgentConsoles::AgentConsoles(asio::io_context& io)
    : io_(io),
      out_(io, 1),
      err_(Console::same_file(1, 2) ? nullptr : std::make_unique<Console>(io, 2)) {}

void AgentConsoles::say(const std::string& line, Level level) {
  const std::string text = launcher_line(line, level);
  if (!text.empty()) err().write(text);
}

std::vector<Console*> AgentConsoles::all() {
  std::vector<Console*> consoles = {&out_};
  if (err_) consoles.push_back(err_.get());
  return consoles;
}

size_t AgentConsoles::queued() {
  size_t total = 0;
  for (Console* c : all()) total += c->queued();
  return total;
}

void AgentConsoles::flush(asio::signal_set& signals, const std::vector<int>& stop_signals,
                          std::chrono::steady_clock::time_point ended) {
  if (queued() == 0) return;
  io_.restart();
  auto flushed = [this] {
    if (queued() == 0) io_.stop();
  };
  for (Console* c : all()) c->when_flushed(flushed);

  asio::steady_timer stall(io_);
  std::function<void()> watch_stall = [&] {
    auto last = ended;
    for (Console* c : all()) last = std::max(last, c->last_progress());
    const auto deadline = last + std::chrono::seconds(Console::kFlushSeconds);
    if (std::chrono::steady_clock::now() >= deadline) {
      io_.stop();
      return;
    }
    stall.expires_at(deadline);
    stall.async_wait([&](boost::system::error_code ec) {
      if (!ec) watch_stall();
    });
  };
  watch_stall();

  int stopped_by = 0;
  std::function<void()> watch_signals = [&] {
    signals.async_wait([&](boost::system::error_code ec, int sig) {
      if (ec) return;
      if (std::find(stop_signals.begin(), stop_signals.end(), sig) != stop_signals.end()) {
        stopped_by = sig;
        io_.stop();
        return;
      }
      watch_signals();
    });
  };
  watch_signals();

  io_.run();
  stall.cancel();
  signals.cancel();
  size_t lost = 0;
  for (Console* c : all()) lost += c->abandon();
  if (lost == 0) return;
  const std::string why =
      stopped_by != 0
          ? fmt::format("received {} while the console was not taking output",
                        signal_name(stopped_by))
          : fmt::format("the console has taken no output for {} s", Console::kFlushSeconds);
  err().write_now(
      fmt::format("trainrun: {}; {} of console output were not written (log files keep the "
                  "workers' output)\n",
                  why, count_of(static_cast<long long>(lost), "byte")));
}

}  // namespace trainrun::launch
