#include "stratum/data/default_corpus.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"

namespace stratum::data {

namespace {

constexpr const char* kLicenseOrder[] = {"GPL-1",    "GPL-2",    "GPL-3",   "LGPL-2",  "LGPL-2.1",
                                         "LGPL-3",   "GFDL-1.2", "GFDL-1.3", "MPL-1.1", "MPL-2.0",
                                         "Artistic", "BSD",      "CC0-1.0", "Apache-2.0"};
constexpr size_t kMinSystemBytes = size_t{64} << 10;

// Public domain: Abraham Lincoln, the Gettysburg Address (Bliss copy, 1863),
// and the opening of the Declaration of Independence (1776).
constexpr const char* kEmbeddedText = R"(Four score and seven years ago our fathers brought forth on this continent, a new nation, conceived in Liberty, and dedicated to the proposition that all men are created equal.

Now we are engaged in a great civil war, testing whether that nation, or any nation so conceived and so dedicated, can long endure. We are met on a great battle-field of that war. We have come to dedicate a portion of that field, as a final resting place for those who here gave their lives that that nation might live. It is altogether fitting and proper that we should do this.

But, in a larger sense, we can not dedicate -- we can not consecrate -- we can not hallow -- this ground. The brave men, living and dead, who struggled here, have consecrated it, far above our poor power to add or detract. The world will little note, nor long remember what we say here, but it can never forget what they did here. It is for us the living, rather, to be dedicated here to the unfinished work which they who fought here have thus far so nobly advanced. It is rather for us to be here dedicated to the great task remaining before us -- that from these honored dead we take increased devotion to that cause for which they gave the last full measure of devotion -- that we here highly resolve that these dead shall not have died in vain -- that this nation, under God, shall have a new birth of freedom -- and that government of the people, by the people, for the people, shall not perish from the earth.

When in the Course of human events, it becomes necessary for one people to dissolve the political bands which have connected them with another, and to assume among the powers of the earth, the separate and equal station to which the Laws of Nature and of Nature's God entitle them, a decent respect to the opinions of mankind requires that they should declare the causes which impel them to the separation.

We hold these truths to be self-evident, that all men are created equal, that they are endowed by their Creator with certain unalienable Rights, that among these are Life, Liberty and the pursuit of Happiness. That to secure these rights, Governments are instituted among Men, deriving their just powers from the consent of the governed, That whenever any Form of Government becomes destructive of these ends, it is the Right of the People to alter or to abolish it, and to institute new Government, laying its foundation on such principles and organizing its powers in such form, as to them shall seem most likely to effect their Safety and Happiness. Prudence, indeed, will dictate that Governments long established should not be changed for light and transient causes; and accordingly all experience hath shewn, that mankind are more disposed to suffer, while evils are sufferable, than to right themselves by abolishing the forms to which they are accustomed. But when a long train of abuses and usurpations, pursuing invariably the same Object evinces a design to reduce them under absolute Despotism, it is their right, it is their duty, to throw off such Government, and to provide new Guards for their future security.
)";

// Reads the whole file into `out`; false if it cannot be read.
bool read_file(const std::string& path, std::string& out) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  out.clear();
  char buf[65536];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, got);
  const bool ok = !std::ferror(f);
  std::fclose(f);
  return ok;
}

}  // namespace

std::string embedded_corpus_text() { return kEmbeddedText; }

std::string default_corpus_text(const std::string& licenses_dir) {
  std::string corpus, text;
  for (const char* name : kLicenseOrder) {
    if (!read_file(licenses_dir + "/" + name, text) || text.empty()) continue;
    corpus += text;
    if (corpus.back() != '\n') corpus += '\n';
    corpus += '\n';
  }
  return corpus.size() >= kMinSystemBytes ? corpus : embedded_corpus_text();
}

std::string write_default_corpus(const std::string& dir, const std::string& licenses_dir) {
  fs::make_directories(dir);
  const std::string path = dir + "/default_corpus.txt";
  const std::string text = default_corpus_text(licenses_dir);
  std::string existing;
  if (read_file(path, existing) && existing == text) return path;
  fs::write_file_atomically(path, text, "the default corpus");
  return path;
}

}  // namespace stratum::data
