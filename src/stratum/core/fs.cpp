#include "stratum/core/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "stratum/core/error.h"

namespace stratum::fs {

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

namespace {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

}  // namespace

std::string describe_bytes(unsigned long long bytes) {
  char buf[64];
  if (bytes < 10000) std::snprintf(buf, sizeof buf, "%llu bytes", bytes);
  else if (bytes < 10'000'000ULL) std::snprintf(buf, sizeof buf, "%.1f kB", bytes / 1e3);
  else if (bytes < 10'000'000'000ULL) std::snprintf(buf, sizeof buf, "%.1f MB", bytes / 1e6);
  else std::snprintf(buf, sizeof buf, "%.1f GB", bytes / 1e9);
  return buf;
}

std::FILE* open_regular_file(const std::string& path, const std::string& what) {
  // stat first names what open cannot (a socket fails open with ENXIO).
  struct stat before;
  if (::stat(path.c_str(), &before) == 0 && !S_ISREG(before.st_mode))
    throw Error(path + ": " + what + " must be a regular file, but this is " + file_kind(before.st_mode));
  // O_NONBLOCK: a path swapped for a FIFO since must not wait for a writer before fstat refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(path + ": cannot open " + what + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string kind = ::fstat(fd, &st) == 0 ? file_kind(st.st_mode) : std::strerror(errno);
    ::close(fd);
    throw Error(path + ": " + what + " must be a regular file, but this is " + kind);
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::FILE* f = ::fdopen(fd, "rb");
  if (!f) {
    const int err = errno;
    ::close(fd);
    throw Error(path + ": cannot open " + what + ": " + std::strerror(err));
  }
  return f;
}

bool is_regular_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string read_regular_file(const std::string& path, size_t max_bytes, const std::string& what,
                              bool follow_symlinks) {
  struct stat st;
  if ((follow_symlinks ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) != 0)
    throw Error(path + ": cannot read " + what + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw Error(path + ": " + what + " must be a regular file, but this is " + file_kind(st.st_mode));
  // O_NONBLOCK: if the path was swapped for a FIFO since stat, open must not wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | (follow_symlinks ? 0 : O_NOFOLLOW));
  if (fd < 0) throw Error(path + ": cannot open " + what + ": " + std::strerror(errno));
  std::string out;
  try {
    if (::fstat(fd, &st) != 0) throw Error(path + ": cannot read " + what + ": " + std::strerror(errno));
    if (!S_ISREG(st.st_mode))
      throw Error(path + ": " + what + " must be a regular file, but this is " + file_kind(st.st_mode));
    if (static_cast<unsigned long long>(st.st_size) > max_bytes)
      throw Error(path + ": " + what + " is " + describe_bytes(static_cast<unsigned long long>(st.st_size)) +
                  ", over the limit of " + describe_bytes(max_bytes) + " (is this the right file?)");
    out.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    // Read one byte past the size seen: a file that grows past the limit meanwhile is refused too.
    while (true) {
      if (got == out.size()) {
        if (out.size() > max_bytes) break;
        out.resize(std::min(max_bytes + 1, std::max<size_t>(out.size() * 2, 4096)));
      }
      const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw Error(path + ": cannot read " + what + ": " + std::strerror(errno));
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    if (got > max_bytes)
      throw Error(path + ": " + what + " is over the limit of " + describe_bytes(max_bytes) + " (is this the right file?)");
    out.resize(got);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return out;
}

bool is_symlink(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

void make_directories(const std::string& path) {
  if (path.empty()) return;
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty() || is_directory(partial)) continue;
    if (::mkdir(partial.c_str(), 0777) != 0 && errno != EEXIST)
      throw Error(path + ": cannot create directory " + partial + ": " + std::strerror(errno));
  }
  if (!is_directory(path)) throw Error(path + ": not a directory");
}

std::string absolute_path(const std::string& path) {
  std::string full = path;
  if (path.empty() || path[0] != '/') {
    char buf[4096];
    if (!::getcwd(buf, sizeof buf)) throw Error(std::string("getcwd: ") + std::strerror(errno));
    full = std::string(buf) + "/" + path;
  }
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= full.size()) {
    size_t end = full.find('/', start);
    if (end == std::string::npos) end = full.size();
    std::string part = full.substr(start, end - start);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    start = end + 1;
  }
  std::string out;
  for (const auto& p : parts) out += "/" + p;
  return out.empty() ? "/" : out;
}

std::vector<std::string> list_directory(const std::string& path) {
  std::vector<std::string> names;
  DIR* d = ::opendir(path.c_str());
  if (!d) return names;
  while (struct dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  return names;
}

void remove_tree(const std::string& path) {
  ::nftw(
      path.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p) == 0 ? 0 : 0; }, 16,
      FTW_DEPTH | FTW_PHYS);
}

std::string make_temp_directory(const std::string& prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string templ = std::string(base && *base ? base : "/tmp") + "/" + prefix + "XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) throw Error(templ + ": cannot create a temporary directory: " + std::strerror(errno));
  return buf.data();
}

std::string temp_path_for(const std::string& path) {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  return path + ".tmp." + host + "." + std::to_string(::getpid());
}

void write_file_atomically(const std::string& path, const std::string& bytes, const std::string& what) {
  const std::string temp = temp_path_for(path);
  std::FILE* f = std::fopen(temp.c_str(), "wb");
  if (!f) throw Error(path + ": cannot write " + what + ": cannot create " + temp + ": " + std::strerror(errno));
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (std::fclose(f) != 0 || !written || ::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(temp.c_str());
    throw Error(path + ": cannot write " + what + ": " + err);
  }
}

}  // namespace stratum::fs
