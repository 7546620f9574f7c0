#pragma once

#include <optional>
#include <string>

#include "trainrun/rendezvous/options.hpp"

namespace trainrun::launch {

// --rdzv-backend. etcd-v2 is torchrun's name for its old etcd backend; trainrun serves it with the
// same etcd backend (its v3 API) and keeps the name apart only to repeat it in messages and to say
// so once (rendezvous::etcd_alias_note).
enum class RendezvousBackend { static_, c10d, etcd, etcd_v2 };

// Every backend, in the order --help names them.
constexpr RendezvousBackend kRendezvousBackends[] = {
    RendezvousBackend::static_, RendezvousBackend::c10d, RendezvousBackend::etcd,
    RendezvousBackend::etcd_v2};

inline bool is_etcd(RendezvousBackend backend) {
  return backend == RendezvousBackend::etcd || backend == RendezvousBackend::etcd_v2;
}

// The name as given on the command line ("static", "etcd-v2").
inline const char* backend_name(RendezvousBackend backend) {
  switch (backend) {
    case RendezvousBackend::static_:
      return "static";
    case RendezvousBackend::c10d:
      return "c10d";
    case RendezvousBackend::etcd:
      return "etcd";
    case RendezvousBackend::etcd_v2:
      return "etcd-v2";
  }
  return "static";
}

// Where the shared token comes from: the --hosts launcher, --rdzv-conf token_file=PATH, and whether
// a file that others than its owner may read is accepted (--rdzv-conf token_file_mode=any).
struct TokenSource {
  std::optional<std::string> file;
  bool any_mode = false;
  // The token itself, as a --hosts launcher hands it to a remote agent (never on a command line).
  std::optional<std::string> handed_over = {};
};

// --rdzv-conf, checked once when the command line is parsed (check_rdzv_conf in
// rdzv/rendezvous_options.hpp): each key's value of its type and in its range; keys not
// given are empty (the rendezvous library's defaults apply). Liveness is resolved there because
// its keys depend on each other.
struct RendezvousConf {
  std::optional<rendezvous::Clock::duration> join_timeout;
  std::optional<rendezvous::Clock::duration> last_call_timeout;
  rendezvous::LivenessOptions liveness;
  std::optional<bool> is_host;
  TokenSource token;             // token_file, token_file_mode
  std::optional<int> rdzv_port;  // static backend: where node rank 0 serves the rendezvous
};

}  // namespace trainrun::launch
