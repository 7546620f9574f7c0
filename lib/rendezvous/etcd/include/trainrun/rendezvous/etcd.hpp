#pragma once

#include <boost/asio/io_context.hpp>
#include <memory>
#include <string_view>

#include "trainrun/rendezvous/handler.hpp"

namespace trainrun::rendezvous {

// etcd's client port, where an endpoint names none.
inline constexpr int kEtcdPort = 2379;

// The backend names that choose etcd: "etcd", and torchrun's "etcd-v2", served the same way.
inline bool is_etcd_backend(std::string_view name) { return name == "etcd" || name == "etcd-v2"; }

// What a backend name that is only an alias gets instead of what it says; empty for the others.
inline std::string_view etcd_alias_note(std::string_view name) {
  return name == "etcd-v2" ? "trainrun speaks etcd's v3 API for etcd and etcd-v2" : "";
}

// The etcd rendezvous: the same rounds as the built-in one, kept in etcd
// (v3 API, through its JSON gateway) under /trainrun/<run id, percent-encoded>/ instead of on a
// hosting agent.
// Each agent holds a lease with keep-alives and its node key on it; the round state changes by
// compare-and-set transactions that any agent may make; every agent watches the prefix. No agent
// is special: any one may be lost and the others see its key vanish when its lease expires.
// options.endpoint is etcd's client endpoint; round.static_ranks does not apply, and is_host
// says whether this node counts as the endpoint's (node rank 0) whatever its address.
// etcd unreachable (at start or later) is retried until join_deadline(options), then the job
// stops on this node with a line naming the endpoint and every distinct failure.
std::unique_ptr<RendezvousHandler> make_etcd_rendezvous_handler(boost::asio::io_context& io,
                                                                RendezvousOptions options,
                                                                LogFunction log);

}  // namespace trainrun::rendezvous
