// The rendezvous frame decoder on an arbitrary byte stream, fed in arbitrary pieces.
#include "fuzz_util.hpp"
#include "trainrun/rendezvous/frame.hpp"

using namespace trainrun::rendezvous;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  // First byte: the piece size pattern; second: handshake or admitted limit.
  const std::size_t step = 1 + data[0] % 64;
  const std::size_t limit = (data[1] & 1) ? kMaxHandshakeFrameSize : kMaxFrameSize;
  data += 2;
  size -= 2;
  FrameDecoder decoder(limit);
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
