// The rendezvous frame decoder on an arbitrary byte stream, fed in arbitrary pieces; with the
// connection past a token handshake, every frame it yields is opened (its tag checked) as well.
#include "frame.hpp"
#include "fuzz_util.hpp"

using namespace trainrun::rendezvous;

namespace {

// Fixed session keys, so that seeds can carry frames sealed for them (fuzz/corpus/frame_decoder).
const SessionKeys kReceiverKeys{"fuzz-key-server-to-client", "fuzz-key-client-to-server"};
const SessionKeys kSenderKeys{kReceiverKeys.receive, kReceiverKeys.send};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  // First byte: the piece size pattern; second: bit 0 handshake or admitted limit, bit 1 sealed
  // frames (after a handshake with a token).
  const std::size_t step = 1 + data[0] % 64;
  const std::size_t limit = (data[1] & 1) ? kMaxHandshakeFrameSize : kMaxFrameSize;
  const bool sealed = (data[1] & 2) != 0;
  data += 2;
  size -= 2;
  FrameDecoder decoder(limit);
  FrameAuth receiver(kReceiverKeys);
  FrameAuth echo_sender(kSenderKeys);
  FrameAuth echo_receiver(kReceiverKeys);
  std::string consumed;  // bytes the decoder took, to compare with the frames it returned
  std::string reencoded;
  std::size_t pos = 0;
  try {
    while (pos < size) {
      const std::size_t piece = std::min(step, size - pos);
      const char* p = reinterpret_cast<const char*>(data + pos);
      std::size_t used = decoder.feed(p, piece);
      FUZZ_CHECK(used <= piece);
      consumed.append(p, used);
      pos += used;
      FUZZ_CHECK(decoder.buffered() <= limit + kFrameHeaderSize);
      if (auto frame = decoder.next()) {
        FUZZ_CHECK(!frame->empty() && frame->size() <= limit);
        reencoded += encode_frame(*frame);
        FUZZ_CHECK(decoder.buffered() == 0);
        if (sealed) {
          // What a peer with the keys seals opens to the same payload, whatever it is...
          if (frame->size() + kFrameTagSize <= kMaxFrameSize) {
            FUZZ_CHECK(echo_receiver.open(echo_sender.seal(*frame)) == *frame);
          }
          // ...and a received frame either opens to its payload or ends the connection.
          std::string payload = receiver.open(*frame);
          FUZZ_CHECK(payload.size() + kFrameTagSize == frame->size());
        }
      } else {
        FUZZ_CHECK(used == piece);  // no frame completed: everything offered was taken
      }
    }
  } catch (const FrameError&) {
    return 0;
  }
  // Whole frames decode to exactly the bytes that carried them.
  FUZZ_CHECK(consumed.compare(0, reencoded.size(), reencoded) == 0);
  return 0;
}
