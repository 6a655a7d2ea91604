// CRC-32C against the published check values (RFC 3720 B.4, the "123456789"
// check of the CRC catalogue), the hardware and table paths agreeing, and
// chaining.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "stratum/core/crc32c.h"

namespace {

using stratum::crc32c;

TEST(Crc32c, MatchesThePublishedCheckValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xff), up(32), down(32);
  for (int i = 0; i < 32; ++i) up[i] = static_cast<unsigned char>(i), down[i] = static_cast<unsigned char>(31 - i);
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(up.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down.data(), 32), 0x113FDB5Cu);
}

TEST(Crc32c, ChainsAcrossPiecesAtAnyAlignment) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  const uint32_t whole = crc32c(text.data(), text.size());
  for (size_t cut : {0, 1, 3, 8, 13, 500, 999, 1000})
    EXPECT_EQ(crc32c(text.data() + cut, text.size() - cut, crc32c(text.data(), cut)), whole) << cut;
}

TEST(Crc32c, CombinesPiecesChecksummedApart) {
  std::string text;
  for (int i = 0; i < 100000; ++i) text += static_cast<char>((i * 131) % 251);
  const uint32_t whole = stratum::crc32c(text.data(), text.size());
  for (size_t cut : {0, 1, 7, 4096, 65537, 99999, 100000}) {
    const uint32_t a = crc32c(text.data(), cut), b = crc32c(text.data() + cut, text.size() - cut);
    EXPECT_EQ(stratum::crc32c_combine(a, b, text.size() - cut), whole) << cut;
  }
}

TEST(Crc32c, OneFlippedBitChangesIt) {
  std::vector<unsigned char> data(4096, 0x5a);
  const uint32_t before = crc32c(data.data(), data.size());
  data[1234] ^= 0x04;
  EXPECT_NE(crc32c(data.data(), data.size()), before);
  EXPECT_EQ(stratum::crc32c_hex(0xE3069283u), "e3069283");
}

}  // namespace
