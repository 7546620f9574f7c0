#include "rendezvous_options.hpp"

#include <fmt/format.h>

#include <cmath>
#include <set>
#include <stdexcept>

#include "config.hpp"
#include "rendezvous_token.hpp"

namespace trainrun::launch {

using rendezvous::Clock;
using rendezvous::HostPort;
using rendezvous::MasterEndpoint;
using rendezvous::RendezvousOptions;
namespace {

const std::set<std::string> kKnownKeys = {
    "join_timeout",        "last_call_timeout",      "close_timeout", "heartbeat_timeout",
    "keep_alive_interval", "keep_alive_max_attempt", "is_host",       "token_file",
    "rdzv_port",           "read_timeout",           "timeout"};

Clock::duration parse_duration(const std::string& key, const std::string& text) {
  std::size_t used = 0;
  double s = -1;
  try {
    s = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !std::isfinite(s) || s <= 0 || s > 1e7) {
    throw std::invalid_argument(
        fmt::format("--rdzv-conf {}={}: expected a number of seconds > 0", key, text));
  }
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

int parse_int(const std::string& key, const std::string& text, int low, int high) {
  std::size_t used = 0;
  long v = low - 1L;
  try {
    v = std::stol(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || v < low || v > high) {
    throw std::invalid_argument(
        fmt::format("--rdzv-conf {}={}: expected an integer in {}..{}", key, text, low, high));
  }
  return static_cast<int>(v);
}

bool parse_bool(const std::string& key, const std::string& text) {
  static const std::set<std::string> yes = {"1", "true", "True", "yes"};
  static const std::set<std::string> no = {"0", "false", "False", "no"};
  if (yes.count(text)) return true;
  if (no.count(text)) return false;
  throw std::invalid_argument(fmt::format("--rdzv-conf {}={}: expected 1 or 0", key, text));
}

}  // namespace

RendezvousOptions rendezvous_options(const LaunchConfig& config,
                                     const std::map<std::string, std::string>& env) {
  RendezvousOptions o;
  const auto& conf = config.rdzv_conf;
  for (const auto& [key, value] : conf) {
    if (!kKnownKeys.count(key)) {
      std::string known;
      for (const auto& k : kKnownKeys) known += (known.empty() ? "" : ", ") + k;
      throw std::invalid_argument(
          fmt::format("--rdzv-conf {}={}: unknown key (known: {})", key, value, known));
    }
  }
  auto get = [&](const char* key) -> const std::string* {
    auto it = conf.find(key);
    return it == conf.end() ? nullptr : &it->second;
  };

  const std::string& backend = config.rdzv_backend;
  if (backend == "etcd" || backend == "etcd-v2") {
    throw std::invalid_argument(fmt::format(
        "--rdzv-backend={}: not available in this build; use --rdzv-backend=c10d", backend));
  }
  if (backend != "static" && backend != "c10d") {
    throw std::invalid_argument(
        fmt::format("--rdzv-backend={}: unknown backend; use c10d or static", backend));
  }
  o.static_backend = backend == "static";
  o.run_id = config.rdzv_id;
  o.min_nodes = config.min_nodes;
  o.max_nodes = config.max_nodes;
  o.max_restarts = config.max_restarts;
  o.local_addr = config.local_addr;

  if (o.static_backend) {
    if (config.min_nodes != config.max_nodes) {
      throw std::invalid_argument(fmt::format(
          "--nnodes={}:{}: the static backend needs a fixed node count; use --rdzv-backend=c10d "
          "with --rdzv-endpoint for elastic jobs",
          config.min_nodes, config.max_nodes));
    }
    if (config.node_rank < 0 || config.node_rank >= config.max_nodes) {
      throw std::invalid_argument(
          fmt::format("--node-rank={}: out of range for --nnodes={} (use 0..{})", config.node_rank,
                      config.max_nodes, config.max_nodes - 1));
    }
    o.node_rank = config.node_rank;
    o.static_master = MasterEndpoint{config.master_addr, config.master_port};
    if (config.master_port <= 0) {
      throw std::invalid_argument(
          "--master-port=0: a multi-node static job needs a fixed --master-port that every node "
          "knows");
    }
    int port = config.master_port + 1;
    if (const auto* p = get("rdzv_port")) {
      port = parse_int("rdzv_port", *p, 1, 65535);
    } else if (port > 65535) {
      throw std::invalid_argument(
          "--master-port=65535: the rendezvous needs MASTER_PORT + 1; give --rdzv-conf "
          "rdzv_port=N");
    }
    o.endpoint = HostPort{config.master_addr, port};
  } else {
    if (config.rdzv_endpoint.empty()) {
      throw std::invalid_argument(
          "--rdzv-backend=c10d needs --rdzv-endpoint=HOST[:PORT] (the same on every node)");
    }
    try {
      o.endpoint = rendezvous::parse_endpoint(config.rdzv_endpoint);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("--rdzv-endpoint={}", e.what()));
    }
  }

  if (const auto* v = get("is_host")) o.is_host = parse_bool("is_host", *v);
  if (const auto* v = get("join_timeout")) o.join_timeout = parse_duration("join_timeout", *v);
  if (const auto* v = get("last_call_timeout"))
    o.last_call_timeout = parse_duration("last_call_timeout", *v);
  if (const auto* v = get("keep_alive_interval"))
    o.keep_alive_interval = parse_duration("keep_alive_interval", *v);
  if (const auto* v = get("heartbeat_timeout")) {
    o.heartbeat_timeout = parse_duration("heartbeat_timeout", *v);
    // With only the timeout given, keep at least three keep-alives inside it.
    if (!get("keep_alive_interval")) {
      o.keep_alive_interval = std::min(o.keep_alive_interval, o.heartbeat_timeout / 3);
    }
  } else if (const auto* n = get("keep_alive_max_attempt")) {
    o.heartbeat_timeout = o.keep_alive_interval * parse_int("keep_alive_max_attempt", *n, 1, 1000);
  }
  if (o.heartbeat_timeout <= o.keep_alive_interval) {
    throw std::invalid_argument(fmt::format(
        "--rdzv-conf: heartbeat_timeout ({:.3g} s) must exceed keep_alive_interval ({:.3g} s)",
        std::chrono::duration<double>(o.heartbeat_timeout).count(),
        std::chrono::duration<double>(o.keep_alive_interval).count()));
  }
  if (o.endpoint.port == 0 && o.is_host != true) {
    throw std::invalid_argument(fmt::format(
        "rendezvous endpoint {}:0: every node needs the real port; port 0 only works with "
        "--rdzv-conf is_host=1",
        o.endpoint.host));
  }
  o.token = load_token(conf, env);
  return o;
}

}  // namespace trainrun::launch
