#include "trainrun/launch/hosts/host_output.hpp"

#include "trainrun/launch/hosts/hosts_plan.hpp"

namespace trainrun::launch {

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
  if (stream == 2 && !text.empty()) h.last_error = text;
  if (!worker && !first_to_say(i, text)) return;
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
