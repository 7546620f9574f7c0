#include "etcd_keys.hpp"

#include <fmt/format.h>

#include <stdexcept>

#include "etcd_client.hpp"
#include "trainrun/base/numbers.hpp"

namespace trainrun::rendezvous {

using json = nlohmann::json;

namespace {

// The end of the key range [prefix, prefix_end): the prefix with its last byte incremented.
std::string range_end(std::string prefix) {
  prefix.back() = static_cast<char>(prefix.back() + 1);
  return prefix;
}

template <class T>
void note_value(std::map<std::string, T>& keys, const std::string& id,
                const std::optional<T>& value) {
  if (value)
    keys[id] = *value;
  else
    keys.erase(id);
}

// A value that is not an `ended` message counts as no answer (the deadline still comes).
std::optional<Ended> ended_report(const json& kv) {
  try {
    ClientMessage m = decode_client_message(base64_decode(kv.value("value", "")));
    if (auto* e = std::get_if<Ended>(&m)) return *e;
  } catch (const ProtocolError&) {
  }
  return std::nullopt;
}

std::optional<std::uint64_t> answered_round(const json& kv) {
  const std::optional<long long> n = parse_integer(base64_decode(kv.value("value", "")));
  if (!n || *n < 0) return std::nullopt;
  return static_cast<std::uint64_t>(*n);
}

}  // namespace

std::int64_t etcd_int(const json& j, const char* key) {
  if (!j.contains(key)) return 0;
  const json& v = j.at(key);
  if (!v.is_string()) return v.get<std::int64_t>();
  const std::optional<long long> n = parse_integer(v.get<std::string>());
  if (!n) throw std::runtime_error(fmt::format("{} is not an integer: {}", key, v.dump()));
  return *n;
}

json EtcdKeyspace::everything() const {
  return {{"key", base64_encode(prefix_)}, {"range_end", base64_encode(range_end(prefix_))}};
}

json EtcdKeyspace::nodes_and_state() const {
  return {{"key", base64_encode(nodes())}, {"range_end", base64_encode(state() + '\0')}};
}

json EtcdKeyspace::nodes_and_round() const {
  return {{"key", base64_encode(nodes())}, {"range_end", base64_encode(round() + '\0')}};
}

json EtcdKeyspace::state_only() const { return {{"key", base64_encode(state())}}; }

EtcdSnapshot EtcdKeyspace::snapshot(const json& response) const {
  EtcdSnapshot s;
  s.revision = etcd_int(response.at("header"), "revision");
  if (!response.contains("kvs")) return s;
  for (const json& kv : response.at("kvs")) {
    const std::string key = base64_decode(kv.at("key").get<std::string>());
    if (key == state()) {
      s.state = decode_state(base64_decode(kv.value("value", "")));
      s.state_mod_revision = etcd_int(kv, "mod_revision");
    } else {
      note(s.keys, key, &kv);
    }
  }
  return s;
}

void EtcdKeyspace::note(EtcdKeys& keys, const std::string& key, const json* kv) const {
  auto under = [&](const std::string& dir) { return key.rfind(dir, 0) == 0; };
  auto value = [&] { return base64_decode(kv->value("value", "")); };
  if (under(nodes())) {
    const std::string id = key.substr(nodes().size());
    if (kv)
      keys.live.insert(id);
    else
      keys.live.erase(id);
  } else if (under(joins())) {
    note_value(keys.joins, key.substr(joins().size()),
               kv ? decode_join(value(), etcd_int(*kv, "mod_revision")) : std::nullopt);
  } else if (under(answers())) {
    note_value(keys.answers, key.substr(answers().size()), kv ? answered_round(*kv) : std::nullopt);
  } else if (under(done())) {
    note_value(keys.done, key.substr(done().size()), kv ? decode_done(value()) : std::nullopt);
  } else if (under(ended())) {
    note_value(keys.ended, key.substr(ended().size()), kv ? ended_report(*kv) : std::nullopt);
  }
}

}  // namespace trainrun::rendezvous
