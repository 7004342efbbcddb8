// `bonsai sweep` as a Slurm job array, end to end: a single-node Slurm cluster private to this
// test (its own munge key and socket, slurm.conf, ports, state and spool folders, all in a scratch
// folder; the daemons run as the current user and die with the test), then scripts/sweep_slurm.sh
// (the submission docs/scale.md shows) runs a 3-plan sweep of zh-tiny-qwen3 as the three
// jobs: prepare, the array, the merge. The merged table must equal the same sweep's on one machine
// (every column but the times), and the logs must show that the tasks measured the rows and the
// merge measured nothing. Without Slurm (slurm-wlm and munge, scripts/deps.sh) or where it cannot
// start, the test is skipped saying why; BONSAI_REQUIRE_SLURM=1 (CI) makes that a failure.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include "formats/error.h"
#include "formats/text_file.h"
#include "support.h"

using namespace bonsai;
namespace fs = std::filesystem;

namespace {

int sh(const std::string& cmd, std::string* out) { return test::run_shell(cmd, out); }

std::string sh_out(const std::string& cmd) {
  std::string out;
  sh(cmd, &out);
  return out;
}

std::string sh_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// A program on PATH or in the sbin folders (munged and the Slurm daemons live in /usr/sbin, which
// a user's PATH may lack); "" when absent.
std::string find_program(const std::string& name) {
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  path += ":/usr/sbin:/sbin:/usr/local/sbin";
  std::stringstream ss(path);
  for (std::string d; std::getline(ss, d, ':');)
    if (!d.empty() && ::access((fs::path(d) / name).c_str(), X_OK) == 0) return (fs::path(d) / name).string();
  return "";
}

// A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick; the daemon binds it a
// moment later).
int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(s);
  return port;
}

std::string tail_of(const fs::path& p, size_t n = 1500) {
  std::ifstream f(p, std::ios::binary);
  const std::string s{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  return s.size() > n ? s.substr(s.size() - n) : s;
}

bool wait_for(const std::function<bool()>& ok, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (ok()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return ok();
}

// munged, slurmctld and slurmd for one node (this host at 127.0.0.1), started in the foreground
// as children of the test, which kill them at the end (and the kernel when the test dies first:
// PR_SET_PDEATHSIG). SLURM_CONF points the client commands (sbatch, squeue, ...) at this cluster.
class LocalSlurm {
 public:
  explicit LocalSlurm(const fs::path& dir) : dir_(dir) { why_not_ = start(); }
  ~LocalSlurm() { stop(); }

  bool up() const { return why_not_.empty(); }
  // A client command of this cluster (squeue, scontrol, ...), quoted for sh.
  std::string tool(const std::string& name) const { return sh_quote(bin_.at(name)); }
  const std::string& why_not() const { return why_not_; }
  // The daemons' logs (their ends), for a failure's message.
  std::string logs() const {
    std::string s;
    for (const char* f : {"slurmctld.log", "slurmd.log", "munged.log"})
      s += cat("--- ", (dir_ / f).string(), ":\n", tail_of(dir_ / f), "\n");
    return s;
  }

 private:
  std::string start() {
    auto& bin = bin_;
    for (const char* p :
         {"munged", "munge", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo"}) {
      bin[p] = find_program(p);
      if (bin[p].empty())
        return cat(p, " is not installed (Debian: apt-get install slurm-wlm munge, as scripts/deps.sh does)");
    }
    const passwd* pw = ::getpwuid(::geteuid());
    if (!pw) return "the current user has no name (getpwuid)";
    const std::string user = pw->pw_name;
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) return "gethostname failed";
    std::string node = host;
    node = node.substr(0, node.find('.'));

    // munge: its own key and socket. munged refuses a socket folder that others cannot enter and
    // a key that others can read.
    std::error_code ec;
    fs::create_directories(dir_ / "state", ec);
    fs::create_directories(dir_ / "spool", ec);
    ::chmod(dir_.c_str(), 0755);
    const fs::path key = dir_ / "munge.key", sock = dir_ / "munge.sock";
    {
      std::vector<uint8_t> k(1024);
      std::ifstream r("/dev/urandom", std::ios::binary);
      r.read(reinterpret_cast<char*>(k.data()), std::streamsize(k.size()));
      test::write_bytes(key, k);
      ::chmod(key.c_str(), 0600);
    }
    spawn(bin["munged"],
          {"-F", "--socket=" + sock.string(), "--key-file=" + key.string(),
           "--pid-file=" + (dir_ / "munged.pid").string(), "--log-file=" + (dir_ / "munged.log").string(),
           "--seed-file=" + (dir_ / "munge.seed").string()},
          dir_ / "munged.out");
    std::string out;
    if (!wait_for(
            [&] { return sh(sh_quote(bin["munge"]) + " -n -S " + sh_quote(sock.string()) + " >/dev/null", &out) == 0; },
            20))
      return cat("munged did not start: ", tail_of(dir_ / "munged.log"), tail_of(dir_ / "munged.out"));

    const int ctld_port = free_port(), slurmd_port = free_port();
    if (ctld_port < 0 || slurmd_port < 0 || ctld_port == slurmd_port) return "no free TCP port on 127.0.0.1";
    const fs::path conf = dir_ / "slurm.conf";
    const std::string d = dir_.string();
    std::ostringstream c;
    c << "# A one-node cluster of tests/mixed/sweep_slurm_slow_test.cpp\n"
      << "ClusterName=bonsaitest\n"
      << "SlurmctldHost=" << node << "(127.0.0.1)\n"
      << "SlurmctldPort=" << ctld_port << "\nSlurmdPort=" << slurmd_port << "\n"
      << "SlurmUser=" << user << "\nSlurmdUser=" << user << "\n"
      << "AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket=" << sock.string() << "\n"
      << "StateSaveLocation=" << d << "/state\nSlurmdSpoolDir=" << d << "/spool\n"
      << "SlurmctldPidFile=" << d << "/slurmctld.pid\nSlurmdPidFile=" << d << "/slurmd.pid\n"
      << "SlurmctldLogFile=" << d << "/slurmctld.log\n"
      << "SlurmdLogFile=" << d << "/slurmd.log\n"
      // No cgroups, accounting or MPI: nothing outside the scratch folder.
      << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n"
      << "AccountingStorageType=accounting_storage/none\nJobCompType=jobcomp/none\n"
      << "MpiDefault=none\nSwitchType=switch/none\n"
      // Jobs start as soon as their dependencies allow; finished jobs stay listed (squeue -t all).
      << "SchedulerType=sched/builtin\nSelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n"
      << "ReturnToService=2\nInactiveLimit=0\nMinJobAge=600\nKillWait=2\n"
      << "NodeName=" << node << " NodeAddr=127.0.0.1 CPUs=" << std::thread::hardware_concurrency() << " State=UNKNOWN\n"
      << "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n";
    write_text_file(conf.string(), c.str());
    // This cluster only: no SLURM_*/SBATCH_* settings of a cluster the test itself may run in.
    std::vector<std::string> drop;
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      for (const char* pre : {"SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_"})
        if (kv.rfind(pre, 0) == 0) drop.push_back(kv.substr(0, kv.find('=')));
    }
    for (const std::string& k : drop) ::unsetenv(k.c_str());
    ::setenv("SLURM_CONF", conf.c_str(), 1);
    conf_set_ = true;
    spawn(bin["slurmctld"], {"-D", "-f", conf.string()}, dir_ / "slurmctld.out");
    if (!wait_for([&] { return sh_out(tool("scontrol") + " ping").find("is UP") != std::string::npos; }, 30))
      return cat("slurmctld did not start: ", tail_of(dir_ / "slurmctld.log"), tail_of(dir_ / "slurmctld.out"));
    ctld_up_ = true;
    spawn(bin["slurmd"], {"-D", "-f", conf.string(), "-N", node}, dir_ / "slurmd.out");
    if (!wait_for([&] { return sh_out(sh_quote(bin["sinfo"]) + " -h -o %T").find("idle") != std::string::npos; }, 30))
      return cat("slurmd did not register as idle: ", sh_out(sh_quote(bin["sinfo"]) + " -h -N -l"),
                 tail_of(dir_ / "slurmd.log"), tail_of(dir_ / "slurmd.out"));
    return "";
  }

  void spawn(const std::string& prog, const std::vector<std::string>& args, const fs::path& log) {
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(1);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) ::dup2(fd, 1), ::dup2(fd, 2), ::close(fd);
      std::vector<char*> argv = {const_cast<char*>(prog.c_str())};
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(prog.c_str(), argv.data());
      ::_exit(127);
    }
    if (pid > 0) pids_.push_back(pid);
  }

  // Jobs first (slurmd's step daemons end their processes), then the daemons, newest first.
  void stop() {
    if (ctld_up_) {
      std::string out;
      sh(tool("scancel") + " --full --user=$(id -un)", &out);
      wait_for([&] { return sh_out(tool("squeue") + " -h -t running,completing -o %i").empty(); }, 15);
    }
    for (auto it = pids_.rbegin(); it != pids_.rend(); ++it) {
      ::kill(*it, SIGTERM);
      int st = 0;
      bool gone = wait_for([&] { return ::waitpid(*it, &st, WNOHANG) == *it; }, 10);
      if (!gone) {
        ::kill(*it, SIGKILL);
        ::waitpid(*it, &st, 0);
      }
    }
    if (conf_set_) ::unsetenv("SLURM_CONF");
  }

  fs::path dir_;
  std::string why_not_;
  std::map<std::string, std::string> bin_;
  std::vector<pid_t> pids_;
  bool conf_set_ = false, ctld_up_ = false;
};

// The first `bytes` of a text file, cut after a line (whole UTF-8 characters).
void head_of(const fs::path& from, const fs::path& to, size_t bytes) {
  std::string s = read_text_file(from.string());
  s = s.substr(0, s.rfind('\n', bytes) + 1);
  write_text_file(to.string(), s);
}

// A CSV with the time columns (quantize_s, eval_s) left out and the output folder spelled DIR.
std::string untimed_csv(const fs::path& csv, const std::string& out_dir) {
  std::stringstream in(read_text_file(csv.string()));
  std::string line, res;
  std::vector<bool> keep;
  while (std::getline(in, line)) {
    for (size_t at; (at = line.find(out_dir)) != std::string::npos;) line.replace(at, out_dir.size(), "DIR");
    std::stringstream cells(line);
    std::vector<std::string> c;
    for (std::string x; std::getline(cells, x, ',');) c.push_back(x);
    if (keep.empty())
      for (const std::string& h : c) keep.push_back(h != "quantize_s" && h != "eval_s");
    for (size_t i = 0; i < c.size(); ++i)
      if (i >= keep.size() || keep[i]) res += c[i] + ",";
    res += "\n";
  }
  return res;
}

}  // namespace

TEST(SweepSlurm, JobArrayMergesToTheOneMachineSweep) {
  BONSAI_REQUIRE_SHARED("models/zh-tiny-qwen3/config.json");
  BONSAI_REQUIRE_SHARED("corpora/zh/eval-debian-handbook-zh-CN.txt");
  BONSAI_REQUIRE_SHARED("corpora/zh/calib-fortunes-zh.txt");
  const fs::path dir = test::scratch_dir();
  LocalSlurm slurm(dir / "slurm");
  if (!slurm.up()) {
    if (const char* req = std::getenv("BONSAI_REQUIRE_SLURM"); req && std::string(req) == "1")
      FAIL() << "BONSAI_REQUIRE_SLURM=1, but Slurm cannot start here: " << slurm.why_not();
    GTEST_SKIP() << "no Slurm cluster can start here: " << slurm.why_not();
  }

  // Small on purpose: a few chunks of short context, a few short calibration windows.
  head_of(test::shared_file("corpora/zh/eval-debian-handbook-zh-CN.txt"), dir / "eval.txt", 6000);
  head_of(test::shared_file("corpora/zh/calib-fortunes-zh.txt"), dir / "calib.txt", 20000);
  // Three plans: the first needing statistics measures them (in the array, the prepare job), the
  // second reuses them, the third needs none; then the Q8_0 reference.
  write_text_file((dir / "tern.yaml").string(),
                  "name: tern\ndefault: PTQ1_0\nrules:\n  - match: '^(token_embd|output)\\.weight$'\n    type: Q8_0\n");
  write_text_file((dir / "pq2.yaml").string(),
                  "name: pq2\nmethod: optimal\ndefault: PQ2_0\nrules:\n  - match: '^(token_embd|output)\\.weight$'\n"
                  "    type: Q8_0\n");
  write_text_file((dir / "q4.yaml").string(), "name: q4\ndefault: Q4_0\n");
  const std::string args = cat("-m ", sh_quote(test::shared_file("models/zh-tiny-qwen3").string()), " --plans ",
                               sh_quote((dir / "tern.yaml").string()), " ", sh_quote((dir / "pq2.yaml").string()), " ",
                               sh_quote((dir / "q4.yaml").string()), " --eval ", sh_quote((dir / "eval.txt").string()),
                               " --ctx 64 --chunks 3 --kl-top-k 16 --calib ", sh_quote((dir / "calib.txt").string()),
                               " --calib-windows 4 --calib-len 64");
  const fs::path local = dir / "local", array = dir / "array", logs = dir / "logs";

  // The array's three jobs, submitted as docs/scale.md shows.
  std::string out;
  const std::string submit = cat("BONSAI=", sh_quote(BONSAI_BINARY), " LOGS=", sh_quote(logs.string()), " ",
                                 sh_quote(std::string(BONSAI_SOURCE_DIR) + "/scripts/sweep_slurm.sh"), " ", args,
                                 " -o ", sh_quote(array.string()));
  ASSERT_EQ(sh(submit, &out), 0) << submit << "\n" << out;
  std::vector<std::string> ids;
  {
    std::stringstream ss(out);
    for (std::string l; std::getline(ss, l);)
      if (!l.empty()) ids.push_back(l);
  }
  ASSERT_EQ(ids.size(), 3u) << out;

  // Meanwhile the same sweep on this machine.
  std::string local_log;
  ASSERT_EQ(test::run_bonsai("sweep " + args + " -o " + sh_quote(local.string()), &local_log), 0) << local_log;

  // Every job leaves the queue (finished, failed or cancelled) within the limit.
  const std::string jobs = ids[0] + "," + ids[1] + "," + ids[2];
  const std::string squeue = slurm.tool("squeue");
  const bool done =
      wait_for([&] { return sh_out(squeue + " -h -t pending,running,completing -j " + jobs).empty(); }, 400);
  const std::string states = sh_out(squeue + " -h -t all -j " + jobs + " -o '%i %j %T'");
  std::string job_logs;
  for (const auto& e : fs::directory_iterator(logs))
    job_logs += cat("--- ", e.path().string(), ":\n", tail_of(e.path()), "\n");
  ASSERT_TRUE(done) << "the jobs did not finish in 400 s:\n" << states << job_logs << slurm.logs();
  // prepare, the four tasks (tern, pq2, q4, q8_0), the merge.
  std::stringstream ss(states);
  int completed = 0;
  for (std::string l; std::getline(ss, l);) completed += l.ends_with(" COMPLETED");
  ASSERT_EQ(completed, 6) << states << job_logs << slurm.logs();

  auto log_of = [&](const std::string& name) { return read_text_file((logs / name).string()); };
  const std::string prep = log_of("sweep-prepare-" + ids[0] + ".out");
  EXPECT_NE(prep.find("statistics: calibrated"), std::string::npos) << prep;
  for (const auto& [i, name] :
       std::vector<std::pair<int, std::string>>{{0, "tern"}, {1, "pq2"}, {2, "q4"}, {3, "q8_0"}}) {
    const std::string t = log_of(cat("sweep-task-", ids[1], "_", i, ".out"));
    // tern's row is the prepare job's (it measured the statistics); each other task measures its own.
    const std::string want = i == 0 ? "tern: finished earlier" : name + ": bonsai quantize --plan";
    EXPECT_NE(t.find(want), std::string::npos) << "task " << i << ":\n" << t;
  }
  const std::string merge = log_of("sweep-merge-" + ids[2] + ".out");
  for (const char* name : {"bf16", "tern", "pq2", "q4", "q8_0"})
    EXPECT_NE(merge.find(cat(name, ": finished earlier")), std::string::npos) << name << "\n" << merge;
  EXPECT_EQ(merge.find("bonsai quantize"), std::string::npos) << "the merge measured a row:\n" << merge;

  const std::string want = untimed_csv(local / "sweep.csv", local.string());
  const std::string got = untimed_csv(array / "sweep.csv", array.string());
  EXPECT_EQ(std::count(want.begin(), want.end(), '\n'), 6) << want;  // header, bf16, three plans, q8_0
  for (const char* row :
       {"\ntern,plan,", ",calibrated,", "\npq2,plan,", ",loaded,", "\nq4,plan,", "\nq8_0,reference,DIR/q8_0.yaml"})
    EXPECT_NE(want.find(row), std::string::npos) << row << "\n" << want;
  EXPECT_EQ(got, want) << "local:\n"
                       << read_text_file((local / "sweep.csv").string()) << "array:\n"
                       << read_text_file((array / "sweep.csv").string());
}
