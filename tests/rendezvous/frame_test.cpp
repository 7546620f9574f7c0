#include "frame.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

using namespace trainrun::rendezvous;

namespace {

std::vector<std::string> decode_all(FrameDecoder& d, const std::string& bytes, std::size_t chunk) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    std::size_t n = std::min(chunk, bytes.size() - pos);
    std::size_t used = 0;
    while (used < n) {
      used += d.feed(bytes.data() + pos + used, n - used);
      while (auto f = d.next()) out.push_back(*f);
    }
    pos += n;
  }
  return out;
}

}  // namespace

TEST_CASE("frames carry a 4-byte big-endian length", "[rendezvous]") {
  std::string f = encode_frame("hello");
  REQUIRE(f.size() == 9);
  CHECK(f.substr(0, 4) == std::string("\0\0\0\x05", 4));
  CHECK(f.substr(4) == "hello");
  std::string big(300, 'x');
  CHECK(encode_frame(big).substr(0, 4) == std::string("\0\0\x01\x2c", 4));
}

TEST_CASE("the decoder reassembles frames whatever the chunking", "[rendezvous]") {
  std::string stream =
      encode_frame("one") + encode_frame(std::string(5000, 'b')) + encode_frame("3");
  for (std::size_t chunk : {1u, 2u, 3u, 7u, 4096u, 100000u}) {
    FrameDecoder d;
    auto frames = decode_all(d, stream, chunk);
    REQUIRE(frames.size() == 3);
    CHECK(frames[0] == "one");
    CHECK(frames[1] == std::string(5000, 'b'));
    CHECK(frames[2] == "3");
    CHECK(d.buffered() == 0);
  }
}

TEST_CASE("the decoder refuses oversize and empty frames before buffering them", "[rendezvous]") {
  FrameDecoder d(1024);
  std::string header("\0\0\x04\x01", 4);  // 1025 bytes
  CHECK_THROWS_AS(d.feed(header.data(), header.size()), FrameError);
  FrameDecoder huge;
  std::string claim("\xff\xff\xff\xff", 4);
  CHECK_THROWS_WITH(huge.feed(claim.data(), claim.size()), Catch::Contains("exceeds the limit"));
  FrameDecoder empty;
  std::string zero("\0\0\0\0", 4);
  CHECK_THROWS_AS(empty.feed(zero.data(), zero.size()), FrameError);
  // An HTTP request is refused at its first four bytes ("GET " is ~1.2 GB as a length).
  FrameDecoder http;
  std::string get = "GET / HTTP/1.1\r\n";
  CHECK_THROWS_AS(http.feed(get.data(), get.size()), FrameError);
}

TEST_CASE("a partial frame holds only the bytes received", "[rendezvous]") {
  FrameDecoder d;
  std::string header("\0\x0f\xff\xff", 4);  // claims ~1 MiB
  d.feed(header.data(), header.size());
  std::string some(10, 'x');
  d.feed(some.data(), some.size());
  CHECK(d.buffered() == 14);
  CHECK_FALSE(d.next());
}

TEST_CASE("encode_frame refuses empty and oversize bodies", "[rendezvous]") {
  CHECK_THROWS_AS(encode_frame(""), FrameError);
  CHECK_THROWS_AS(encode_frame(std::string(kMaxFrameSize + 1, 'x')), FrameError);
}
