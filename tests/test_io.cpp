#include <gtest/gtest.h>

#include <zlib.h>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
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
