#include "host_output.hpp"

#include <cctype>

#include "hosts_plan.hpp"

namespace trainrun::launch {

namespace {

// An agent's line of a node or the rendezvous server lost ("node n1 lost: left: ...", "lost the
// rendezvous server at ...", "... so the job cannot continue").
bool says_lost(const std::string& text) {
  if (text.rfind("trainrun: ", 0) != 0) return false;
  if (text.find("cannot continue") != std::string::npos) return true;
  for (size_t at = text.find("lost"); at != std::string::npos; at = text.find("lost", at + 1)) {
    const bool starts = text[at - 1] == ' ';
    const char next = at + 4 == text.size() ? ' ' : text[at + 4];
    const bool ends = !std::isalnum(static_cast<unsigned char>(next)) && next != '-';
    if (starts && ends) return true;
  }
  return false;
}

}  // namespace

void HostOutput::add_host(const std::string& host) {
  Host h;
  h.name = host;
  h.address = host_address(host);
  hosts_.push_back(std::move(h));
}

HostOutput::Lines HostOutput::feed(size_t i, int stream, std::string_view bytes,
                                   Clock::time_point now) {
  Lines out;
  std::string& part = hosts_[i].partial[stream];
  part.append(bytes.data(), bytes.size());
  size_t start = 0;
  for (size_t nl; (nl = part.find('\n', start)) != std::string::npos; start = nl + 1)
    line(out, i, stream, part.substr(start, nl - start), now);
  part.erase(0, start);
  return out;
}

HostOutput::Lines HostOutput::close(size_t i, int stream, Clock::time_point now) {
  Lines out;
  std::string& part = hosts_[i].partial[stream];
  if (!part.empty()) line(out, i, stream, std::move(part), now);
  part.clear();
  return out;
}

void HostOutput::line(Lines& out, size_t i, int stream, std::string text, Clock::time_point now) {
  Host& h = hosts_[i];
  if (stream == 1 && !h.ready && text == kReadyLine) {
    h.ready = true;
    return;
  }
  auto worker = split_worker_line(text, h.address);
  // ssh ends its own lines with "\r\n".
  if (!worker && !text.empty() && text.back() == '\r') text.pop_back();
  // Once the agent runs, its own lines and its workers' are not ssh's: a lost connection is
  // named with ssh's last line alone.
  const bool agents = h.ready && (worker || text.rfind("trainrun: ", 0) == 0);
  if (stream == 2 && !text.empty() && !agents) h.last_error = text;
  if (!worker && !first_to_say(i, text)) return;
  if (!worker && stopping_every_host_ && says_lost(text)) return;
  if (!worker) text = h.name + ": " + text;
  if (dedup_) {
    if (worker)
      held_.add(now, stream, worker->first, std::move(worker->second), std::move(text));
    else
      held_.add(now, stream, std::nullopt, "", std::move(text));
    return;
  }
  out.push_back({stream, std::move(text)});
}

bool HostOutput::first_to_say(size_t i, const std::string& text) {
  if (text.rfind("trainrun: ", 0) != 0) return true;
  if (said_.size() >= kMaxSaidLines) said_.clear();
  const auto [it, added] = said_.emplace(text, i);
  return added || it->second == i;
}

}  // namespace trainrun::launch
