#include "trainrun/rendezvous/crypto.hpp"

#include <catch2/catch.hpp>
#include <string>

#include "trainrun/rendezvous/messages.hpp"

using namespace trainrun::rendezvous;

TEST_CASE("sha256 matches the FIPS 180-4 examples", "[rendezvous]") {
  CHECK(to_hex(sha256("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(to_hex(sha256("abc")) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(to_hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(to_hex(sha256(std::string(1000000, 'a'))) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("hmac_sha256 matches RFC 4231", "[rendezvous]") {
  CHECK(to_hex(hmac_sha256(std::string(20, '\x0b'), "Hi There")) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(to_hex(hmac_sha256("Jefe", "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 6: a key longer than the block is hashed first.
  CHECK(to_hex(hmac_sha256(std::string(131, '\xaa'),
                           "Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  // Test case 7: a long key and a long message.
  CHECK(to_hex(hmac_sha256(std::string(131, '\xaa'),
                           "This is a test using a larger than block-size key and a larger than "
                           "block-size data. The key needs to be hashed before being used by the "
                           "HMAC algorithm.")) ==
        "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
  // The message may come in parts: the MAC is that of their concatenation.
  CHECK(hmac_sha256("Jefe", {"what do ya ", "", "want for nothing?"}) ==
        hmac_sha256("Jefe", "what do ya want for nothing?"));
  // An empty key is valid HMAC (RFC 2104 pads it with zeros).
  CHECK(to_hex(hmac_sha256("", "")) ==
        "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

TEST_CASE("constant_time_equal compares content and length", "[rendezvous]") {
  CHECK(constant_time_equal("abcd", "abcd"));
  CHECK_FALSE(constant_time_equal("abcd", "abce"));
  CHECK_FALSE(constant_time_equal("abcd", "bbcd"));
  CHECK_FALSE(constant_time_equal("abcd", "abc"));
  CHECK(constant_time_equal("", ""));
}

TEST_CASE("nonces are 32 fresh random bytes, in the hex a hello carries", "[rendezvous]") {
  std::string a = random_nonce();
  std::string b = random_nonce();
  CHECK(a.size() == 64);
  CHECK(a != b);
  CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
  Hello hello;
  hello.run_id = "job7";
  hello.nonce = a;
  ClientMessage decoded = decode_client_message(encode(ClientMessage{hello}));
  REQUIRE(std::holds_alternative<Hello>(decoded));
  CHECK(std::get<Hello>(decoded).nonce == a);
}
