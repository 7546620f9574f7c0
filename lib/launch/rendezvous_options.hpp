#pragma once

#include <map>
#include <string>

#include "trainrun/rendezvous/handler.hpp"
#include "trainrun/rendezvous/options.hpp"

namespace trainrun::launch {

struct LaunchConfig;

// The rendezvous options of this job: the command line's values combined, and the shared token
// read (--rdzv-conf token_file=PATH, else TRAINRUN_RDZV_TOKEN).
//
// The static backend's server listens on --master-addr at rdzv_port, by default MASTER_PORT + 1:
// MASTER_PORT itself belongs to worker RANK 0's store.
//
// Throws std::invalid_argument with a one-line reason naming the option.
rendezvous::RendezvousOptions rendezvous_options(const LaunchConfig& config,
                                                 const std::map<std::string, std::string>& env);

// The launcher's name for the rendezvous library, with the mapping above beside it.
namespace rdzv {
using namespace ::trainrun::rendezvous;
using ::trainrun::launch::rendezvous_options;
}  // namespace rdzv

}  // namespace trainrun::launch
