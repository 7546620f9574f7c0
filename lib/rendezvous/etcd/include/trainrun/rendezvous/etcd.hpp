#pragma once

#include <boost/asio/io_context.hpp>
#include <memory>

#include "trainrun/rendezvous/handler.hpp"

namespace trainrun::rendezvous {

// The etcd rendezvous (--rdzv-backend=etcd): the same rounds as the built-in one, kept in etcd
// (v3 API, through its JSON gateway) under /trainrun/<run id, percent-encoded>/ instead of on a
// hosting agent.
// Each agent holds a lease with keep-alives and its node key on it; the round state changes by
// compare-and-set transactions that any agent may make; every agent watches the prefix. No agent
// is special: any one may be lost and the others see its key vanish when its lease expires.
// options.endpoint is etcd's client endpoint; round.static_ranks and is_host do not apply.
// etcd unreachable (at start or later) is retried until options.retry.deadline, then the job
// stops on this node with a line naming the endpoint.
std::unique_ptr<RendezvousHandler> make_etcd_rendezvous_handler(boost::asio::io_context& io,
                                                                RendezvousOptions options,
                                                                LogFunction log);

}  // namespace trainrun::rendezvous
