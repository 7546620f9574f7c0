#include "fork_request.hpp"

#include <nlohmann/json.hpp>

#include "trainrun/base/text.hpp"

namespace trainrun::launch {

namespace {

nlohmann::json json_text(const std::string& bytes) {
  if (valid_utf8_prefix(bytes).size() == bytes.size()) return bytes;
  nlohmann::json values = nlohmann::json::array();
  for (const char c : bytes) values.push_back(static_cast<unsigned char>(c));
  return values;
}

nlohmann::json json_texts(const std::vector<std::string>& items) {
  nlohmann::json list = nlohmann::json::array();
  for (const std::string& item : items) list.push_back(json_text(item));
  return list;
}

}  // namespace

std::optional<ForkRequest> fork_request(const SpawnRequest& r,
                                        const std::array<bool, 3>& open_streams) {
  ForkRequest out;
  nlohmann::json streams = nlohmann::json::array();
  const Stdio* const stdio[3] = {&r.in, &r.out, &r.err};
  for (int i = 0; i < 3; ++i) {
    switch (stdio[i]->kind) {
      case Stdio::Kind::pipe:
        return std::nullopt;  // no worker asks for one
      case Stdio::Kind::null:
        streams.push_back("null");
        break;
      case Stdio::Kind::fd:
        streams.push_back("fd");
        out.fds.push_back(stdio[i]->fd);
        break;
      case Stdio::Kind::inherit:
        // Ours, as a spawned child would have it; closed where ours is.
        streams.push_back(open_streams[static_cast<std::size_t>(i)] ? "fd" : "closed");
        if (open_streams[static_cast<std::size_t>(i)]) out.fds.push_back(i);
        break;
    }
  }
  if (r.cgroup_fd >= 0) out.fds.push_back(r.cgroup_fd);
  // The kept descriptor of a worker is its diagnosis channel (diagnosis.hpp).
  const bool diagnosis = r.kept_fd > 2;
  if (diagnosis) out.fds.push_back(r.kept_fd);
  nlohmann::json cpus = nlohmann::json::array();
  for (const int cpu : r.cpus) cpus.push_back(cpu);
  const nlohmann::json request = {
      {"argv", json_texts(r.argv)},
      {"env", r.env ? json_texts(*r.env) : nlohmann::json::array()},
      {"cwd", r.cwd.empty() ? nlohmann::json(nullptr) : json_text(r.cwd)},
      {"group", r.group == SpawnRequest::Group::new_session ? nlohmann::json("session")
                : r.group == SpawnRequest::Group::new_group ? nlohmann::json("group")
                                                            : nlohmann::json(nullptr)},
      {"death_signal", r.death_signal},
      {"descriptor_limit",
       r.descriptor_limit ? nlohmann::json(*r.descriptor_limit) : nlohmann::json(nullptr)},
      {"streams", streams},
      {"cgroup", r.cgroup_fd >= 0},
      {"diagnosis", diagnosis},
      {"cpus", cpus},
  };
  out.json = request.dump();
  return out;
}

}  // namespace trainrun::launch
