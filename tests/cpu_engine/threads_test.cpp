// Thread counts (cpu_engine/threads.h): the physical-core count against an
// independent reading of the topology (distinct thread_siblings_list lines of
// the CPUs this process may use), the default, and the oversubscription warning.
#include "cpu_engine/threads.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <fstream>
#include <set>
#include <string>

#include <fmt/format.h>

namespace futr::cpu {
namespace {

TEST(Threads, PhysicalCoresMatchSiblingLists) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  std::set<std::string> siblings;
  bool readable = true;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    std::ifstream f(fmt::format("/sys/devices/system/cpu/cpu{}/topology/thread_siblings_list", c));
    std::string line;
    if (!std::getline(f, line)) readable = false;
    siblings.insert(line);
  }
  EXPECT_GE(physical_cores(), 1);
  EXPECT_LE(physical_cores(), logical_cpus());
  EXPECT_EQ(logical_cpus(), CPU_COUNT(&set));
  // Siblings outside the mask still name the same core, so the count agrees.
  if (readable) {
    EXPECT_EQ(physical_cores(), int(siblings.size()));
  }
  std::printf("[ topology ] %d physical cores, %d logical CPUs\n", physical_cores(), logical_cpus());
}

TEST(Threads, DefaultIsPhysicalCores) {
  EXPECT_EQ(set_num_threads(0), physical_cores());
  EXPECT_EQ(num_threads(), physical_cores());
  EXPECT_EQ(set_num_threads(1), 1);
  EXPECT_EQ(num_threads(), 1);
}

TEST(Threads, WarnsAboveThePhysicalCores) {
  const int cores = physical_cores();
  EXPECT_EQ(oversubscription_warning(1), "");
  EXPECT_EQ(oversubscription_warning(cores), "");
  const std::string w = oversubscription_warning(cores + 1);
  EXPECT_NE(w.find(fmt::format("{} threads on {} physical core", cores + 1, cores)), std::string::npos) << w;
  EXPECT_NE(w.find(fmt::format("-t {}", cores)), std::string::npos) << w;
  static int fresh = 0;  // a count not warned about yet in this process (--gtest_repeat)
  const int n = cores + 1 + fresh++;
  testing::internal::CaptureStderr();
  set_num_threads(n);
  set_num_threads(n);  // once per count
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, oversubscription_warning(n) + "\n");
  set_num_threads(0);
}

TEST(Threads, WarnsWhenOtherProcessesKeepTheCpusBusy) {
  // An idle machine, or threads that fit beside the load: no warning.
  EXPECT_EQ(contention_warning(2, 2, 0.0), "");
  EXPECT_EQ(contention_warning(2, 2, 0.4), "");
  EXPECT_EQ(contention_warning(4, 8, 3.0), "");
  EXPECT_EQ(contention_warning(1, 2, 1.9), "");  // one thread is the least there is
  // The 2-core machine with one busy process: 2 threads wait on each other.
  const std::string w = contention_warning(2, 2, 1.0);
  EXPECT_NE(w.find("load average 1.0 on 2 logical CPUs"), std::string::npos) << w;
  EXPECT_NE(w.find("-t 1 (--threads)"), std::string::npos) << w;
  EXPECT_NE(contention_warning(16, 16, 6.2).find("-t 10 "), std::string::npos);
  EXPECT_NE(contention_warning(2, 2, 5.0).find("-t 1 "), std::string::npos);  // never below 1
  EXPECT_EQ(contention_warning(0, 2, 5.0), "");
}

}  // namespace
}  // namespace futr::cpu
