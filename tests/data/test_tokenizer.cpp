// The byte tokenizer: exact round trips for any bytes, and a decode that never
// throws.
#include <gtest/gtest.h>

#include "stratum/data/tokenizer.h"

using namespace stratum::data;

TEST(ByteTokenizer, AsciiRoundTrip) {
  ByteTokenizer tok;
  const std::string text = "Hello, world!\nThe quick brown fox.";
  const auto ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[0], 'H');
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_EQ(tok.vocab_size(), 256);
  EXPECT_EQ(tok.name(), "byte");
}

TEST(ByteTokenizer, Utf8RoundTripIsOneTokenPerByte) {
  ByteTokenizer tok;
  const std::string text = "na\xC3\xAFve caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xE6\x97\xA5\xE6\x9C\xAC";
  const auto ids = tok.encode(text);
  EXPECT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[2], 0xC3);
  EXPECT_EQ(tok.decode(ids), text);
}

TEST(ByteTokenizer, AllByteValuesRoundTrip) {
  ByteTokenizer tok;
  std::string bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(static_cast<char>(b));
  bytes += bytes;  // NUL and high bytes in the middle too
  const auto ids = tok.encode(bytes);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(ids[i], i);
  EXPECT_EQ(tok.decode(ids), bytes);
  EXPECT_TRUE(tok.encode("").empty());
  EXPECT_EQ(tok.decode({}), "");
}

TEST(ByteTokenizer, DecodeMapsUnknownIdsToReplacementCharacter) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.decode({'a', 256, 'b', -1, 1 << 30}), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(ToValidUtf8, KeepsValidTextAndReplacesEachBadByte) {
  const std::string valid = "caf\xC3\xA9 \xF0\x9F\x98\x80";
  EXPECT_EQ(to_valid_utf8(valid), valid);
  EXPECT_EQ(to_valid_utf8("a\xC3"), "a\xEF\xBF\xBD");              // cut in the middle of a character
  EXPECT_EQ(to_valid_utf8("\xFFx"), "\xEF\xBF\xBDx");              // never valid
  EXPECT_EQ(to_valid_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong '/'
  EXPECT_EQ(to_valid_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
}
