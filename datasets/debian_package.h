// Source text from Debian packages: `apt-get download` and `dpkg-deb -x` into a work folder,
// nothing installed (no root needed beyond what apt-get download itself needs).
#pragma once
#include <string>
#include <vector>

namespace bonsai::datasets {

struct UnpackedPackage {
  std::string name;
  std::string version;  // the .deb's Version field, e.g. "4:7.4.7-1+deb12u14"
  std::string deb;      // path of the .deb
  std::string root;     // folder it was unpacked into
};

// Downloads `package` into <work>/debs (unless a .deb of it is already there) and unpacks it
// into <work>/x/<package> (unless already unpacked). Error naming the package and the failed
// command when a step fails.
UnpackedPackage fetch_package(const std::string& package, const std::string& work_dir);

// Runs argv (no shell: arguments reach the program as given) in `cwd`, waits for it, and
// returns its standard output. Error naming the command when it cannot start or exits non-zero.
std::string run_command(const std::vector<std::string>& argv, const std::string& cwd = "");

}  // namespace bonsai::datasets
