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

TEST(Threads, DefaultIsTheFreePhysicalCores) {
  EXPECT_EQ(set_num_threads(0), default_threads());
  EXPECT_EQ(num_threads(), default_threads());
  EXPECT_GE(default_threads(), 1);
  EXPECT_LE(default_threads(), idle_default_threads());
  EXPECT_LE(idle_default_threads(), physical_cores());
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
// The default on an idle machine: the physical cores, one left free above 4;
// other processes' load takes its cores away, never below one thread.
TEST(Threads, DefaultAdaptsToTheLoad) {
  EXPECT_EQ(default_threads(1, 1, -1), 1);
  EXPECT_EQ(default_threads(2, 2, -1), 2);
  EXPECT_EQ(default_threads(4, 8, -1), 4);
  EXPECT_EQ(default_threads(8, 16, -1), 7);
  EXPECT_EQ(default_threads(2, 2, 0.3), 2);   // idle
  EXPECT_EQ(default_threads(2, 2, 1.0), 1);   // the 2-core machine with one busy process
  EXPECT_EQ(default_threads(2, 2, 12.0), 1);  // never below one
  EXPECT_EQ(default_threads(8, 16, 6.2), 7);  // hyperthreads left free: the cores are
  EXPECT_EQ(default_threads(16, 16, 6.2), 10);
}

// OMP_NUM_THREADS caps the default (its first entry, an integer >= 1); any
// other value is ignored.
TEST(Threads, OmpNumThreadsValue) {
  EXPECT_EQ(omp_num_threads_value(nullptr), 0);
  EXPECT_EQ(omp_num_threads_value(""), 0);
  EXPECT_EQ(omp_num_threads_value("4"), 4);
  EXPECT_EQ(omp_num_threads_value("8,2"), 8);
  EXPECT_EQ(omp_num_threads_value("0"), 0);
  EXPECT_EQ(omp_num_threads_value("-3"), 0);
  EXPECT_EQ(omp_num_threads_value("four"), 0);
  EXPECT_EQ(omp_num_threads_value("4 "), 0);
  EXPECT_EQ(omp_num_threads_value("99999999999"), 0);  // out of int range
}

// A decode step far slower than the recent ones while the CPUs are
// oversubscribed warns once, naming the count that fits; slow steps on an
// idle machine (a long context, a page fault) or before enough steps were
// seen do not.
TEST(Threads, ContentionWatchWarnsOnceWhenStepsSlowDownUnderLoad) {
  {
    ContentionWatch w(2);
    for (int i = 0; i < ContentionWatch::kMinSteps - 1; ++i) EXPECT_EQ(w.observe(0.010, 2, 0.1), "");
    EXPECT_EQ(w.observe(0.100, 2, 3.0), "");  // too few steps seen
  }
  {
    ContentionWatch w(2);
    for (int i = 0; i < 20; ++i) EXPECT_EQ(w.observe(0.010, 2, 0.1), "");
    EXPECT_EQ(w.observe(0.100, 2, 0.2), "");  // slow, but the machine is idle
    EXPECT_EQ(w.observe(0.035, 2, 3.0), "");  // busy, but only 3.5x slower
    const std::string m = w.observe(0.100, 2, 3.0);
    EXPECT_NE(m.find("slowed from 10.0 ms to 100.0 ms"), std::string::npos) << m;
    EXPECT_NE(m.find("load average 3.0 on 2 logical CPUs"), std::string::npos) << m;
    EXPECT_NE(m.find("-t 1 (--threads)"), std::string::npos) << m;
    EXPECT_EQ(w.observe(0.500, 2, 3.0), "");  // once
  }
  {
    ContentionWatch w(1);  // one thread: no smaller count to suggest
    for (int i = 0; i < 20; ++i) w.observe(0.010, 2, 0.1);
    const std::string m = w.observe(0.100, 2, 4.0);
    EXPECT_NE(m.find("slowed"), std::string::npos) << m;
    EXPECT_EQ(m.find("-t "), std::string::npos) << m;
  }
}

}  // namespace futr::cpu
