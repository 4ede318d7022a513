#include <gtest/gtest.h>

#include <zlib.h>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/core/sha256.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

std::string hex_of(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (const char byte : bytes) {
    hex += kDigits[static_cast<unsigned char>(byte) >> 4];
    hex += kDigits[static_cast<unsigned char>(byte) & 15];
  }
  return hex;
}

// RFC 4231's test cases 1-7 (case 5's MAC is truncated to 128 bits there).
TEST(HmacSha256, Rfc4231Vectors) {
  EXPECT_EQ(hex_of(hmac_sha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hex_of(hmac_sha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hex_of(hmac_sha256(std::string(20, '\xaa'), std::string(50, '\xdd'))),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  std::string key_0x01_to_0x19;
  for (char c = 1; c <= 25; ++c) key_0x01_to_0x19 += c;
  EXPECT_EQ(hex_of(hmac_sha256(key_0x01_to_0x19, std::string(50, '\xcd'))),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  EXPECT_EQ(hex_of(hmac_sha256(std::string(20, '\x0c'), "Test With Truncation")).substr(0, 32),
            "a3b6167473100ee06e0c796c2955552b");
  // Keys longer than SHA-256's 64-byte block are hashed first.
  EXPECT_EQ(hex_of(hmac_sha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(hex_of(hmac_sha256(std::string(131, '\xaa'),
                               "This is a test using a larger than block-size key and a larger than block-size data. The key "
                               "needs to be hashed before being used by the HMAC algorithm.")),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST(HmacSha256, RawDigestIsTheHexOne) {
  EXPECT_EQ(sha256("abc").size(), 32u);
  EXPECT_EQ(hex_of(sha256("abc")), sha256_hex("abc"));
}

TEST(EqualInConstantTime, ComparesEveryByteAndTheLength) {
  EXPECT_TRUE(equal_in_constant_time("", ""));
  EXPECT_TRUE(equal_in_constant_time(std::string("a\0b", 3), std::string("a\0b", 3)));
  EXPECT_FALSE(equal_in_constant_time("abc", "abd"));
  EXPECT_FALSE(equal_in_constant_time("xbc", "abc"));
  EXPECT_FALSE(equal_in_constant_time("abc", "abcd"));
  EXPECT_FALSE(equal_in_constant_time(std::string("a\0", 2), "a"));
}

TEST(Sha256, BundledDataMatchesItsProvenance) {
  EXPECT_EQ(sha256_file(test::squad_v1_path()), "5ef5752d50566ab538501116de1508326eefb6bf70026def7915309f30822727");
  EXPECT_EQ(sha256_hex(read_file(test::squad_v1_path())), "95aa6a52d5d6a735563366753ca50492a658031da74f301ac5238b03966972c9");
  EXPECT_EQ(sha256_file(test::vocab_path()), "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3");
}

TEST(ReadFile, InflatesGzipWhateverTheNameAndReadsPlainFiles) {
  test::TempDir dir;
  test::write_text(dir.file("plain.txt"), "hello");
  EXPECT_EQ(read_file(dir.file("plain.txt")), "hello");
  std::string copy = read_file(test::squad_v1_path());
  test::write_text(dir.file("renamed.bin"), copy);
  EXPECT_EQ(read_file(dir.file("renamed.bin")), copy);
}

TEST(ReadFile, CorruptGzipIsAnError) {
  test::TempDir dir;
  std::string compressed = read_file(test::vocab_path());  // the plain text to compress
  // Build a valid gzip, then flip a byte inside the deflate data.
  uLongf size = compressBound(static_cast<uLong>(compressed.size())) + 64;
  std::string gz(size, '\0');
  z_stream stream{};
  deflateInit2(&stream, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  stream.next_in = reinterpret_cast<Bytef*>(compressed.data());
  stream.avail_in = static_cast<uInt>(compressed.size());
  stream.next_out = reinterpret_cast<Bytef*>(gz.data());
  stream.avail_out = static_cast<uInt>(gz.size());
  ASSERT_EQ(deflate(&stream, Z_FINISH), Z_STREAM_END);
  gz.resize(stream.total_out);
  deflateEnd(&stream);
  test::write_text(dir.file("ok.gz"), gz);
  EXPECT_EQ(read_file(dir.file("ok.gz")), compressed);
  gz[gz.size() / 2] = static_cast<char>(gz[gz.size() / 2] ^ 0x5a);
  test::write_text(dir.file("bad.gz"), gz);
  EXPECT_THROW(read_file(dir.file("bad.gz")), InputError);
  EXPECT_THROW(read_file(dir.file("missing.gz")), InputError);
}

TEST(WriteFileAtomic, LeavesOnlyTheFinalFile) {
  test::TempDir dir;
  write_file_atomic(dir.file("out.json"), "{}");
  EXPECT_EQ(read_file(dir.file("out.json")), "{}");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.json"});
  EXPECT_THROW(write_file_atomic(dir.file("no/such/dir/out.json"), "{}"), InputError);
}

}  // namespace
}  // namespace mpibert
