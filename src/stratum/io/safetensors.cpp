#include "stratum/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"
#include "stratum/core/heartbeat.h"
#include "stratum/core/mapped_file.h"
#include "stratum/io/safetensors_header.h"

namespace stratum::io {

using Json = nlohmann::json;

namespace {

struct DType {
  const char* name;
  at::ScalarType type;
};
constexpr DType kDTypes[] = {{"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf},  {"BF16", at::kBFloat16},
                             {"I64", at::kLong},   {"I32", at::kInt},   {"I16", at::kShort}, {"I8", at::kChar},
                             {"U8", at::kByte},    {"BOOL", at::kBool}};

// Closes a file descriptor on every path out.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void read_exact(int fd, void* dst, uint64_t size, uint64_t offset, const std::string& what) {
  auto* p = static_cast<char*>(dst);
  while (size > 0) {
    heartbeat::beat();
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(size, 1ull << 30));
    const ssize_t got = ::pread(fd, p, chunk, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) throw Error(what + (got < 0 ? std::string(": ") + std::strerror(errno) : ": unexpected end of file"));
    p += got;
    size -= static_cast<uint64_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

void write_all(int fd, const void* src, uint64_t size, const std::string& what) {
  const auto* p = static_cast<const char*>(src);
  while (size > 0) {
    heartbeat::beat();  // a large save is progress (stratum-run's --heartbeat_timeout)
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(size, 1ull << 30));
    const ssize_t put = ::write(fd, p, chunk);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) throw Error(what + ": " + std::strerror(errno));
    p += put;
    size -= static_cast<uint64_t>(put);
  }
}

// The torch-free header (io/safetensors_header.h), with each dtype's torch type.
SafetensorsHeader read_header(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) throw Error(path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw Error(path + ": not a regular file (a safetensors file is)");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  unsigned char prefix[8] = {};
  if (size >= 8) read_exact(fd, prefix, 8, 0, path + ": header length");
  const uint64_t n = safetensors_header_length(prefix, size, path);
  std::string text(n, '\0');
  read_exact(fd, text.data(), n, 8, path + ": header");
  SafetensorsHeaderInfo info = parse_safetensors_header(text, size - 8 - n, path);

  SafetensorsHeader h;
  h.path = path;
  h.header_length = info.header_length;
  h.data_length = info.data_length;
  h.metadata = std::move(info.metadata);
  for (auto& t : info.tensors) {
    const DType* d = std::find_if(std::begin(kDTypes), std::end(kDTypes), [&](const DType& x) { return t.dtype == x.name; });
    if (d == std::end(kDTypes)) throw Error(path + ": tensor '" + t.name + "': dtype '" + t.dtype + "' has no torch type");
    h.tensors.push_back(SafetensorsEntry{std::move(t.name), std::move(t.dtype), d->type, std::move(t.shape), t.begin, t.end});
  }
  return h;
}

int open_for_reading(const std::string& path) {
  // O_NONBLOCK: a FIFO given as a file must not wait for a writer (read_header refuses it).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  return fd;
}

std::map<std::string, at::Tensor> read_tensors(const std::string& path, const std::set<std::string>* names) {
  Fd f{open_for_reading(path)};
  const SafetensorsHeader h = read_header(f.fd, path);
  if (names) {
    for (const auto& n : *names)
      if (std::none_of(h.tensors.begin(), h.tensors.end(), [&](const SafetensorsEntry& e) { return e.name == n; }))
        throw Error(path + ": no tensor '" + n + "' in the file");
  }
  std::map<std::string, at::Tensor> out;
  const uint64_t data_start = 8 + h.header_length;
  for (const auto& e : h.tensors) {
    if (names && !names->count(e.name)) continue;
    at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.scalar_type));
    if (e.end > e.begin) read_exact(f.fd, t.data_ptr(), e.end - e.begin, data_start + e.begin, path + ": tensor '" + e.name + "'");
    out.emplace(e.name, std::move(t));
  }
  return out;
}

}  // namespace

std::map<std::string, at::Tensor> map_safetensors(const std::string& path) {
  Fd f{open_for_reading(path)};
  const SafetensorsHeader h = read_header(f.fd, path);
  const uint64_t data_start = 8 + h.header_length, file_size = data_start + h.data_length;
  std::map<std::string, at::Tensor> out;
  if (h.data_length == 0) {
    for (const auto& e : h.tensors) out.emplace(e.name, at::empty(e.shape, at::TensorOptions().dtype(e.scalar_type)));
    return out;
  }
  // The mapping lives as long as any tensor over it.
  auto mapping = std::make_shared<MappedFile>(path);
  if (mapping->size() != file_size) throw Error(path + ": changed while it was read");
  for (const auto& e : h.tensors) {
    auto* data = const_cast<unsigned char*>(mapping->data()) + data_start + e.begin;  // read-only: never written
    auto* keep = new std::shared_ptr<MappedFile>(mapping);
    out.emplace(e.name, at::from_blob(
                            data, e.shape, [keep](void*) { delete keep; },
                            at::TensorOptions().dtype(e.scalar_type)));
  }
  return out;
}

std::string safetensors_dtype(at::ScalarType type) {
  for (const auto& d : kDTypes)
    if (d.type == type) return d.name;
  throw Error(std::string("safetensors: dtype ") + c10::toString(type) + " is not supported (" +
              safetensors_dtype_names() + ")");
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  Fd f{open_for_reading(path)};
  return read_header(f.fd, path);
}

std::map<std::string, at::Tensor> read_safetensors(const std::string& path) { return read_tensors(path, nullptr); }

std::map<std::string, at::Tensor> read_safetensors(const std::string& path, const std::set<std::string>& names) {
  return read_tensors(path, &names);
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Largest elements first keeps every tensor aligned to its element size.
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__" || name.empty()) throw Error(path + ": '" + name + "' cannot name a tensor");
    if (!seen.insert(name).second) throw Error(path + ": tensor '" + name + "' given twice");
    if (!t.defined()) throw Error(path + ": tensor '" + name + "' is undefined");
    try {
      safetensors_dtype(t.scalar_type());
    } catch (const Error& e) {
      throw Error(path + ": tensor '" + name + "': " + e.what());
    }
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return tensors[a].second.element_size() > tensors[b].second.element_size();
  });

  Json header = Json::object();
  uint64_t offset = 0;
  for (size_t i : order) {
    const auto& [name, t] = tensors[i];
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    header[name] = {{"dtype", safetensors_dtype(t.scalar_type())},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  Json meta = Json::object();
  for (const auto& [k, v] : metadata) meta[k] = v;
  if (!meta.contains("format")) meta["format"] = "pt";
  header["__metadata__"] = meta;
  std::string text = header.dump();
  text.append((8 - (text.size() % 8)) % 8, ' ');  // data start 8-byte aligned

  const std::string tmp = fs::temp_path_for(path);
  Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (f.fd < 0) throw Error(path + ": cannot create " + tmp + ": " + std::strerror(errno));
  try {
    unsigned char prefix[8];
    for (int i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>(static_cast<uint64_t>(text.size()) >> (8 * i));
    write_all(f.fd, prefix, 8, path);
    write_all(f.fd, text.data(), text.size(), path);
    for (size_t i : order) {
      const auto& [name, t] = tensors[i];
      const at::Tensor cpu = t.detach().to(at::kCPU).contiguous();
      write_all(f.fd, cpu.data_ptr(), static_cast<uint64_t>(cpu.numel()) * cpu.element_size(),
                path + ": tensor '" + name + "'");
    }
    if (::fsync(f.fd) != 0) throw Error(path + ": fsync: " + std::strerror(errno));
    ::close(f.fd);
    f.fd = -1;
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw Error(path + ": cannot rename " + tmp + " into place: " + std::strerror(errno));
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
}

}  // namespace stratum::io
