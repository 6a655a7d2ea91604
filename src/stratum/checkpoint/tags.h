#pragma once
// The names inside a checkpoint directory: tag directories beside a `latest`
// file that names one of them. `latest` is read as a plain tag (one line, a
// name inside its own directory: no '/', no "..", no link), so it can never
// lead a loader elsewhere. Plain C++, no torch.
#include <optional>
#include <string>
#include <vector>

namespace stratum {

// Empty when `tag` may name a checkpoint ("global_step100"); otherwise why not.
std::string tag_name_problem(const std::string& tag);

// The tag `latest` names; nullopt when there is no `latest`. Throws
// stratum::Error naming the file when it is not a regular file (a link, a
// FIFO, a directory), is over 4 kB, is empty, or holds something that is not
// a tag name.
std::optional<std::string> latest_checkpoint_tag(const std::string& dir);

// Tag directories (holding manifest.json) in `dir`, in natural order (global_step9 before global_step10).
std::vector<std::string> list_checkpoint_tags(const std::string& dir);

// What --resume does with a save directory.
struct ResumePoint {
  enum class Kind { fresh, resume } kind = Kind::fresh;
  std::string tag;     // Kind::resume
  std::string reason;  // Kind::fresh: said to the user ("... does not exist yet")
};
// `tag` given: that tag, which must exist. Otherwise: a readable `latest`
// resumes; an absent directory, or one holding nothing but leftovers of an
// interrupted save ("*.tmp"), starts fresh; anything else (checkpoints or
// other files but no usable `latest`) is an error naming what is there and
// the tag to pass.
ResumePoint resolve_resume(const std::string& save_dir, const std::string& tag = "");

}  // namespace stratum
