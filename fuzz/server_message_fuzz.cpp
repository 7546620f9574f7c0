// What an agent parses from the rendezvous server: one frame body.
#include "message_fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  trainrun::fuzz::check_message(trainrun::fuzz::as_view(data, size),
                                trainrun::rendezvous::decode_server_message);
  return 0;
}
