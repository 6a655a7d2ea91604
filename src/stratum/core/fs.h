#pragma once
// The few file-system operations Stratum needs, on POSIX calls. Not
// std::filesystem: the CUDA builds of libtorch.so (2.11) export their own
// copies of std::filesystem functions, which the dynamic linker binds ahead
// of libstdc++'s, and at least remove_all crashes there (null call).
#include <cstdio>
#include <string>
#include <vector>

namespace stratum::fs {

bool exists(const std::string& path);
bool is_directory(const std::string& path);
bool is_symlink(const std::string& path);  // the path itself, not what it points to
// mkdir -p; throws stratum::Error naming the path.
void make_directories(const std::string& path);
// An absolute, normalized path ("." and ".." resolved lexically; links kept).
std::string absolute_path(const std::string& path);
// Names in a directory (no "." or ".."); empty if it cannot be read.
std::vector<std::string> list_directory(const std::string& path);
// rm -rf without a shell; quietly ignores what is already gone.
void remove_tree(const std::string& path);
// Reads a whole file that must be a regular file of at most `max_bytes`
// (a FIFO, device or directory is refused without blocking on it, so
// /dev/zero or a pipe cannot hang or exhaust memory). With
// follow_symlinks=false a symbolic link is refused too. Throws
// stratum::Error "<path>: <what> ..." saying what is wrong.
std::string read_regular_file(const std::string& path, size_t max_bytes, const std::string& what,
                              bool follow_symlinks = true);
// Opens a regular file to stream it (a file with no natural size limit, such
// as a corpus): a FIFO, device, socket or directory is refused by name without
// blocking on it, as read_regular_file does. The caller fcloses the stream.
// Throws stratum::Error "<path>: <what> ...".
std::FILE* open_regular_file(const std::string& path, const std::string& what);
// True for a regular file (links followed); false for anything else or nothing.
bool is_regular_file(const std::string& path);
// "12.5 MB", "800 bytes": sizes in messages.
std::string describe_bytes(unsigned long long bytes);

// A new, empty directory under $TMPDIR (or /tmp) whose name starts with `prefix`.
std::string make_temp_directory(const std::string& prefix);

// A name beside `path` to write it under before renaming it into place, unique
// per host and process (ranks on a shared file system may write the same file).
std::string temp_path_for(const std::string& path);

// Writes `bytes` to `path` atomically: into temp_path_for(path), then renamed,
// so a reader sees the old file or the whole new one. Throws stratum::Error
// "<path>: cannot write <what>: <reason>".
void write_file_atomically(const std::string& path, const std::string& bytes, const std::string& what);

}  // namespace stratum::fs
