#pragma once
// The default corpus: real English text that needs no network. Plain C++.
//
// It is the license texts every Debian and Ubuntu system ships in
// /usr/share/common-licenses (package base-files), concatenated in a fixed
// order, each followed by a blank line: GPL-1, GPL-2, GPL-3, LGPL-2, LGPL-2.1,
// LGPL-3, GFDL-1.2, GFDL-1.3, MPL-1.1, MPL-2.0, Artistic, BSD, CC0-1.0,
// Apache-2.0 (about 237 KB on Debian 12; missing ones are skipped). Apache-2.0
// comes last because it shares little wording with the others, and the
// held-out split is the end of the text. When these files hold less than
// 64 KiB (a trimmed image), the corpus is a text embedded here instead: the
// Gettysburg Address and the opening of the Declaration of Independence
// (public domain, about 3 KB; enough to run, too little to learn much).
#include <string>

namespace stratum::data {

inline constexpr const char* kSystemLicensesDir = "/usr/share/common-licenses";

std::string default_corpus_text(const std::string& licenses_dir = kSystemLicensesDir);
// The embedded fallback alone.
std::string embedded_corpus_text();

// Writes `dir/default_corpus.txt` (creating dir) unless it already holds this
// exact text, so its time stamp, and with it a token cache, survives reruns.
// Atomic (temporary file + rename). Returns the path.
std::string write_default_corpus(const std::string& dir, const std::string& licenses_dir = kSystemLicensesDir);

}  // namespace stratum::data
