#include "datasets/debian_package.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "datasets/source_file.h"
#include "formats/error.h"

extern char** environ;

namespace bonsai::datasets {
namespace fs = std::filesystem;

namespace {

std::string describe(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

}  // namespace

std::string run_command(const std::vector<std::string>& argv, const std::string& cwd) {
  if (argv.empty()) throw Error("run_command: no command");
  int out_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) fail(describe(argv), "cannot create a pipe: ", std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], STDOUT_FILENO);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out_pipe[1]);
  if (rc != 0) {
    ::close(out_pipe[0]);
    fail(describe(argv), "cannot start: ", std::strerror(rc));
  }
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(out_pipe[0], buf, sizeof buf);
    if (n > 0) {
      out.append(buf, size_t(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(out_pipe[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail(describe(argv),
         WIFEXITED(status) ? cat("exited with status ", WEXITSTATUS(status)) : std::string("was killed by a signal"));
  return out;
}

UnpackedPackage fetch_package(const std::string& package, const std::string& work_dir) {
  UnpackedPackage p;
  p.name = package;
  const fs::path debs = fs::path(work_dir) / "debs";
  std::error_code ec;
  fs::create_directories(debs, ec);
  if (ec) fail(debs.string(), "cannot create the download folder: ", ec.message());
  // apt-get names the file <package>_<version with ':' as %3a>_<arch>.deb.
  auto find_deb = [&] {
    const auto all = list_files(debs, ".deb", false);
    std::string found;
    for (const auto& f : all)
      if (fs::path(f).filename().string().starts_with(package + "_")) found = f;  // the last in order
    return found;
  };
  p.deb = find_deb();
  if (p.deb.empty()) {
    run_command({"apt-get", "download", package}, debs.string());
    p.deb = find_deb();
    if (p.deb.empty()) fail(debs.string(), "apt-get download ", package, " left no ", package, "_*.deb");
  }
  p.version = run_command({"dpkg-deb", "-f", p.deb, "Version"});
  while (!p.version.empty() && (p.version.back() == '\n' || p.version.back() == ' ')) p.version.pop_back();
  if (p.version.empty()) fail(p.deb, "has no Version field");
  const fs::path root = fs::path(work_dir) / "x" / package;
  p.root = root.string();
  if (!fs::is_directory(root, ec)) {
    // Unpack beside the final name and rename, so an interrupted run never leaves a half tree
    // that a later run would take as complete.
    const fs::path tmp = fs::path(work_dir) / "x" / (package + ".partial");
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    if (ec) fail(tmp.string(), "cannot create: ", ec.message());
    run_command({"dpkg-deb", "-x", p.deb, tmp.string()});
    fs::rename(tmp, root, ec);
    if (ec) fail(root.string(), "cannot rename the unpacked tree into place: ", ec.message());
  }
  return p;
}

}  // namespace bonsai::datasets
