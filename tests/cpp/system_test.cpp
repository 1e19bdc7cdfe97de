// Parsers and readers of dldoctor_core/system on recorded file contents and on small fake
// /proc and /sys trees in a temp dir; the real machine is checked from Python (test_check.py).
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "dldoctor_core/common/error.hpp"
#include "dldoctor_core/system/cgroup.hpp"
#include "dldoctor_core/system/collect.hpp"
#include "dldoctor_core/system/container.hpp"
#include "dldoctor_core/system/cpu.hpp"
#include "dldoctor_core/system/file.hpp"
#include "dldoctor_core/system/limits.hpp"
#include "dldoctor_core/system/memory.hpp"
#include "dldoctor_core/system/mountinfo.hpp"
#include "dldoctor_core/system/pressure.hpp"
#include "dldoctor_core/system/shm.hpp"
#include "dldoctor_core/system/storage.hpp"

namespace fs = std::filesystem;
using namespace dldoctor::system;

namespace {

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "dldoctor-system-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string path() const { return path_; }
  std::string operator/(const std::string& rel) const { return join_path(path_, rel); }
  // Writes `content` to `rel`, creating parent directories.
  std::string write(const std::string& rel, const std::string& content) const {
    std::string p = *this / rel;
    fs::create_directories(fs::path(p).parent_path());
    std::ofstream(p) << content;
    return p;
  }

 private:
  std::string path_;
};

}  // namespace

// --- mountinfo -------------------------------------------------------------------------------

TEST(SystemMountinfo, ParsesLineWithOptionalFieldsAndEscapes) {
  auto m = parse_mountinfo_line(
      "36 35 98:0 /mnt1 /mnt/my\\040data rw,noatime master:1 shared:7 - ext3 /dev/root "
      "rw,errors=continue");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->device_numbers, "98:0");
  EXPECT_EQ(m->root, "/mnt1");
  EXPECT_EQ(m->mount_point, "/mnt/my data");
  EXPECT_EQ(m->mount_options, "rw,noatime");
  EXPECT_EQ(m->fs_type, "ext3");
  EXPECT_EQ(m->source, "/dev/root");
  EXPECT_EQ(m->super_options, "rw,errors=continue");
}

TEST(SystemMountinfo, UnescapesEveryOctalAndKeepsBrokenEscapes) {
  EXPECT_EQ(unescape_mount_field("a\\011b\\012c\\134d"), "a\tb\nc\\d");
  EXPECT_EQ(unescape_mount_field("tail\\04"), "tail\\04");
  EXPECT_EQ(unescape_mount_field("x\\9yz"), "x\\9yz");
}

TEST(SystemMountinfo, RejectsMalformedLines) {
  EXPECT_FALSE(parse_mountinfo_line(""));
  EXPECT_FALSE(parse_mountinfo_line("1 2 3:4 / /x rw"));                  // no separator
  EXPECT_FALSE(parse_mountinfo_line("1 2 3:4 / /x rw - tmpfs"));          // no source
  EXPECT_FALSE(parse_mountinfo_line("1 2 3:4 / relative rw - ext4 /dev/x rw"));
  auto all = parse_mountinfo("garbage\n22 1 0:21 / /proc rw - proc proc rw\n\n");
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].mount_point, "/proc");
}

TEST(SystemMountinfo, FindsLongestWholeComponentPrefixAndTopOfStack) {
  auto mounts = parse_mountinfo(
      "27 1 254:0 / / rw - ext4 /dev/vda rw\n"
      "25 27 0:23 / /dev/shm rw - tmpfs tmpfs rw,size=24684084k\n"
      "30 25 0:27 / /dev/shm rw - tmpfs tmpfs rw,size=16384k\n"
      "40 27 0:50 / /data rw - nfs4 server:/export rw\n");
  ASSERT_EQ(mounts.size(), 4u);
  const Mount* shm = find_mount(mounts, "/dev/shm/torch_123");
  ASSERT_TRUE(shm);
  EXPECT_EQ(shm->super_options, "rw,size=16384k");  // the later mount is on top
  EXPECT_EQ(find_mount(mounts, "/data/x")->fs_type, "nfs4");
  EXPECT_EQ(find_mount(mounts, "/data")->fs_type, "nfs4");
  EXPECT_EQ(find_mount(mounts, "/database")->fs_type, "ext4");  // not a component prefix
  EXPECT_EQ(find_mount({}, "/x"), nullptr);
}

TEST(SystemMountinfo, MissingProcGivesNoMounts) {
  EXPECT_TRUE(read_mountinfo("/nonexistent-proc").empty());
}

// --- cgroups ---------------------------------------------------------------------------------

TEST(SystemCgroup, ParsesProcCgroupV1AndV2Lines) {
  auto lines = parse_proc_cgroup(
      "12:cpu,cpuacct:/docker/abc\n4:memory:/user/1\n1:name=systemd:/init.scope\n0::/a/b\nbad\n");
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0].hierarchy, 12);
  EXPECT_EQ(lines[0].controllers, (std::vector<std::string>{"cpu", "cpuacct"}));
  EXPECT_EQ(lines[0].path, "/docker/abc");
  EXPECT_EQ(lines[2].controllers, (std::vector<std::string>{"name=systemd"}));
  EXPECT_EQ(lines[3].hierarchy, 0);
  EXPECT_TRUE(lines[3].controllers.empty());
  EXPECT_EQ(lines[3].path, "/a/b");
}

TEST(SystemCgroup, ParsesQuotaAndLimitValues) {
  EXPECT_EQ(parse_cpu_max("50000 100000\n"), 0.5);
  EXPECT_EQ(parse_cpu_max("150000 100000"), 1.5);
  EXPECT_FALSE(parse_cpu_max("max 100000\n"));
  EXPECT_FALSE(parse_cpu_max(""));
  EXPECT_EQ(cfs_quota_cpus(50000, 100000), 0.5);
  EXPECT_FALSE(cfs_quota_cpus(-1, 100000));
  EXPECT_FALSE(cfs_quota_cpus(std::nullopt, 100000));
  EXPECT_EQ(parse_memory_limit("1073741824\n"), 1073741824);
  EXPECT_FALSE(parse_memory_limit("9223372036854771712\n"));  // v1 "unlimited"
  EXPECT_FALSE(parse_memory_limit("max\n"));
  EXPECT_EQ(parse_stat_field("cache 5\ntotal_inactive_file 42\n", "total_inactive_file"), 42);
  EXPECT_EQ(parse_stat_field("inactive_file 7\n", "inactive_file"), 7);
  EXPECT_FALSE(parse_stat_field("total_inactive_file 42\n", "inactive_file"));
}

TEST(SystemCgroup, WalksV1ChainAndKeepsTightestQuota) {
  TempDir t;
  t.write("cg/cpu/cpu.cfs_quota_us", "-1\n");
  t.write("cg/cpu/cpu.cfs_period_us", "100000\n");
  t.write("cg/cpu/job/cpu.cfs_quota_us", "150000\n");
  t.write("cg/cpu/job/cpu.cfs_period_us", "100000\n");
  t.write("cg/cpu/job/step/cpu.cfs_quota_us", "-1\n");
  t.write("cg/cpu/job/step/cpu.cfs_period_us", "100000\n");
  Cgroups cg(parse_proc_cgroup("3:cpu,cpuacct:/job/step\n0::/\n"),
             parse_mountinfo("32 31 0:29 / " + (t / "cg/cpu") +
                             " rw - cgroup cgroup rw,cpu,cpuacct\n"));
  EXPECT_EQ(cg.dir("cpu"), t / "cg/cpu/job/step");
  EXPECT_EQ(cg.chain("cpu"),
            (std::vector<std::string>{t / "cg/cpu/job/step", t / "cg/cpu/job", t / "cg/cpu"}));
  EXPECT_EQ(cg.dir("memory"), "");
  EXPECT_EQ(cg.version(), "v1");
  auto [quota, source] = cgroup_cpu_quota(cg);
  EXPECT_EQ(quota, 1.5);
  EXPECT_EQ(source, t / "cg/cpu/job/cpu.cfs_quota_us");

  t.write("cg/cpu/job/step/cpu.cfs_quota_us", "50000\n");
  EXPECT_EQ(cgroup_cpu_quota(cg).first, 0.5);
}

TEST(SystemCgroup, MapsPathsUnderAMountRoot) {
  // Docker without a cgroup namespace: the mount's root is the container's own cgroup.
  TempDir t;
  t.write("cg/cpu/cpu.cfs_quota_us", "200000\n");
  t.write("cg/cpu/cpu.cfs_period_us", "100000\n");
  Cgroups cg(parse_proc_cgroup("3:cpu:/docker/abc\n"),
             parse_mountinfo("32 31 0:29 /docker/abc " + (t / "cg/cpu") +
                             " rw - cgroup cgroup rw,cpu\n"));
  EXPECT_EQ(cg.dir("cpu"), t / "cg/cpu");
  EXPECT_EQ(cgroup_cpu_quota(cg).first, 2.0);
}

TEST(SystemCgroup, ReadsV2CpuMax) {
  TempDir t;
  t.write("cg/cpu.max", "max 100000\n");
  t.write("cg/a/cpu.max", "250000 100000\n");
  Cgroups cg(parse_proc_cgroup("0::/a\n"),
             parse_mountinfo("31 23 0:28 / " + (t / "cg") + " rw - cgroup2 cgroup2 rw\n"));
  EXPECT_EQ(cg.version(), "v2");
  auto [quota, source] = cgroup_cpu_quota(cg);
  EXPECT_EQ(quota, 2.5);
  EXPECT_EQ(source, t / "cg/a/cpu.max");
}

TEST(SystemCgroup, UnknownWhenProcIsMissing) {
  auto cg = Cgroups::read("/nonexistent-proc");
  EXPECT_FALSE(cg.known());
  EXPECT_EQ(cg.version(), "");
  EXPECT_TRUE(cg.chain("cpu").empty());
  EXPECT_FALSE(cgroup_cpu_quota(cg).first);
}

// --- memory ----------------------------------------------------------------------------------

TEST(SystemMemory, ParsesMeminfoInBytes) {
  auto m = parse_meminfo(
      "MemTotal:       24684084 kB\nMemFree:        1 kB\nMemAvailable:   24339988 kB\n"
      "SwapTotal:             0 kB\nSwapFree:              0 kB\n");
  EXPECT_EQ(m.total_bytes, int64_t{24684084} * 1024);
  EXPECT_EQ(m.available_bytes, int64_t{24339988} * 1024);
  EXPECT_EQ(m.swap_total_bytes, 0);
  EXPECT_FALSE(m.cgroup_limit_bytes);
  auto partial = parse_meminfo("MemTotal: 100 kB\n");
  EXPECT_FALSE(partial.available_bytes);  // older kernels: absent, not 0
}

TEST(SystemMemory, PicksCgroupLevelWithLeastHeadroom) {
  TempDir t;
  const int64_t gib = int64_t{1} << 30;
  t.write("cg/memory.limit_in_bytes", "9223372036854771712\n");
  t.write("cg/memory.usage_in_bytes", std::to_string(10 * gib));
  t.write("cg/job/memory.limit_in_bytes", std::to_string(gib));
  t.write("cg/job/memory.usage_in_bytes", std::to_string(900 << 20));
  t.write("cg/job/memory.stat", "cache 1\ntotal_inactive_file " + std::to_string(100 << 20) + "\n");
  t.write("cg/job/leaf/memory.limit_in_bytes", std::to_string(2 * gib));
  t.write("cg/job/leaf/memory.usage_in_bytes", std::to_string(100 << 20));
  Cgroups cg(parse_proc_cgroup("4:memory:/job/leaf\n"),
             parse_mountinfo("35 31 0:32 / " + (t / "cg") + " rw - cgroup cgroup rw,memory\n"));
  MemoryFacts m;
  read_cgroup_memory(cg, m);
  EXPECT_EQ(m.cgroup_limit_bytes, gib);
  EXPECT_EQ(m.cgroup_usage_bytes, 900 << 20);
  EXPECT_EQ(m.cgroup_working_set_bytes, 800 << 20);
  EXPECT_EQ(m.cgroup_source, t / "cg/job/memory.limit_in_bytes");
}

TEST(SystemMemory, UnlimitedCgroupKeepsUsageAndNoLimit) {
  TempDir t;
  t.write("cg/a/memory.max", "max\n");
  t.write("cg/a/memory.current", "4096\n");
  Cgroups cg(parse_proc_cgroup("0::/a\n"),
             parse_mountinfo("31 23 0:28 / " + (t / "cg") + " rw - cgroup2 cgroup2 rw\n"));
  MemoryFacts m;
  read_cgroup_memory(cg, m);
  EXPECT_FALSE(m.cgroup_limit_bytes);
  EXPECT_EQ(m.cgroup_usage_bytes, 4096);
}

// --- cpu -------------------------------------------------------------------------------------

TEST(SystemCpu, CountsDistinctCoresFromTopology) {
  TempDir t;
  auto topo = [&](int cpu, int core, int package) {
    std::string d = "devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    t.write(d + "core_id", std::to_string(core) + "\n");
    t.write(d + "physical_package_id", std::to_string(package) + "\n");
  };
  topo(0, 0, 0);
  topo(1, 0, 0);  // hyperthread sibling of cpu0
  topo(2, 1, 0);
  topo(3, 0, 1);  // same core id, other socket
  EXPECT_EQ(count_physical_cores({0, 1, 2, 3}, t.path()), 3);
  EXPECT_EQ(count_physical_cores({0, 1}, t.path()), 1);
  EXPECT_FALSE(count_physical_cores({0, 9}, t.path()));  // cpu9 unreadable: unknown, not 1
  EXPECT_FALSE(count_physical_cores({}, t.path()));
}

TEST(SystemCpu, UsableIsMinOfAffinityAndQuota) {
  EXPECT_EQ(usable_cpus(4, 0.5, 8), 0.5);
  EXPECT_EQ(usable_cpus(2, 3.0, 8), 2.0);
  EXPECT_EQ(usable_cpus(2, std::nullopt, 8), 2.0);
  EXPECT_EQ(usable_cpus(std::nullopt, std::nullopt, 8), 8.0);
  EXPECT_FALSE(usable_cpus(std::nullopt, std::nullopt, std::nullopt));
}

TEST(SystemCpu, AffinityMatchesTheKernel) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  auto cpus = affinity_cpus();
  ASSERT_TRUE(cpus);
  EXPECT_EQ(static_cast<int>(cpus->size()), CPU_COUNT(&set));
}

// --- pressure, limits, container -------------------------------------------------------------

TEST(SystemPressure, ParsesSomeAvg10) {
  EXPECT_EQ(parse_pressure_some_avg10("some avg10=1.11 avg60=2.47 avg300=1.54 total=7064325\n"
                                      "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
            1.11);
  EXPECT_FALSE(parse_pressure_some_avg10("full avg10=3.00 avg60=0.00 avg300=0.00 total=0\n"));
  EXPECT_FALSE(parse_pressure_some_avg10("some avg10=x avg60=0\n"));
  EXPECT_FALSE(read_pressure("/nonexistent-proc", "cpu"));
}

TEST(SystemLimits, InfinityIsUnlimitedAndFdsAreCounted) {
  EXPECT_FALSE(rlimit_value(RLIM_INFINITY));
  EXPECT_EQ(rlimit_value(1024), 1024);
  auto before = count_open_fds("/proc");
  ASSERT_TRUE(before);
  int fd = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(count_open_fds("/proc"), *before + 1);
  ::close(fd);
  EXPECT_FALSE(count_open_fds("/nonexistent-proc"));
  struct rlimit r;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &r), 0);
  EXPECT_EQ(read_limits("/proc").nofile_soft, rlimit_value(r.rlim_cur));
}

TEST(SystemContainer, NamesKindFromMarkers) {
  EXPECT_EQ(container_kind_from_cgroup("11:memory:/kubepods/burstable/pod1/abc\n"), "kubernetes");
  EXPECT_EQ(container_kind_from_cgroup("0::/machine.slice/libpod-abc.scope\n"), "podman");
  EXPECT_EQ(container_kind_from_cgroup("4:cpu:/docker/abc\n"), "docker");
  EXPECT_EQ(container_kind_from_cgroup("0::/init.scope\n"), "");

  TempDir t;
  t.write("proc/1/cgroup", "0::/init.scope\n");
  auto bare = detect_container(t / "root", t / "proc", nullptr);
  EXPECT_EQ(bare.in_container, false);
  t.write("root/.dockerenv", "");
  auto docker = detect_container(t / "root", t / "proc", nullptr);
  EXPECT_EQ(docker.in_container, true);
  EXPECT_EQ(docker.kind, "docker");
  EXPECT_EQ(detect_container(t / "root", t / "proc", "10.0.0.1").kind, "kubernetes");
  auto unknown = detect_container(t / "nothing", "/nonexistent-proc", nullptr);
  EXPECT_FALSE(unknown.in_container);  // nothing readable: unknown, not "no"
}

// --- storage ---------------------------------------------------------------------------------

TEST(SystemStorage, NamesNetworkFilesystems) {
  EXPECT_TRUE(is_network_fs("nfs4", "server:/export"));
  EXPECT_TRUE(is_network_fs("lustre", "10.0.0.1@tcp:/fs"));
  EXPECT_TRUE(is_network_fs("fuse.s3fs", "s3fs"));
  EXPECT_TRUE(is_network_fs("fuse.gcsfuse", "my-bucket"));
  EXPECT_TRUE(is_network_fs("fuse.sshfs", "user@host:/data"));
  EXPECT_TRUE(is_network_fs("fuse", "//server/share"));
  EXPECT_FALSE(is_network_fs("fuse.lxcfs", "lxcfs"));
  EXPECT_FALSE(is_network_fs("ext4", "/dev/nvme0n1p1"));
  EXPECT_FALSE(is_network_fs("overlay", "overlay"));
  EXPECT_FALSE(is_network_fs("tmpfs", "tmpfs"));
}

TEST(SystemStorage, ResolvesPartitionToDiskAndReadsRotational) {
  TempDir t;
  t.write("devices/pci0/block/sda/queue/rotational", "1\n");
  t.write("devices/pci0/block/sda/sda1/partition", "1\n");
  t.write("devices/virtio/block/vda/queue/rotational", "0\n");
  fs::create_directories(t / "dev/block");
  fs::create_symlink("../../devices/pci0/block/sda/sda1", t / "dev/block/8:1");
  fs::create_symlink("../../devices/virtio/block/vda", t / "dev/block/254:0");
  fs::create_directories(t / "block");
  fs::create_symlink(t / "devices/pci0/block/sda", t / "block/sda");
  fs::create_symlink(t / "devices/virtio/block/vda", t / "block/vda");
  EXPECT_EQ(block_device_name("8:1", t.path()), "sda");
  EXPECT_EQ(block_device_name("254:0", t.path()), "vda");
  EXPECT_EQ(block_device_name("0:23", t.path()), "");
  EXPECT_EQ(read_rotational("sda", t.path()), true);
  EXPECT_EQ(read_rotational("vda", t.path()), false);
  EXPECT_FALSE(read_rotational("", t.path()));
  EXPECT_FALSE(read_rotational("nvme9n9", t.path()));
}

TEST(SystemStorage, CountsFilesAndMeasuresReads) {
  TempDir t;
  std::string block(1 << 20, 'x');
  t.write("data/a/1.bin", block);
  t.write("data/a/2.bin", block);
  t.write("data/b/3.bin", "abc");
  auto f = probe_storage(t / "data", 2.0, 1000);
  EXPECT_EQ(f.files, 3);
  EXPECT_EQ(f.bytes, 2 * (1 << 20) + 3);
  EXPECT_FALSE(f.count_truncated);
  ASSERT_TRUE(f.read_mb_s);
  EXPECT_GT(*f.read_mb_s, 0);
  EXPECT_EQ(f.probe_bytes, 2 * (1 << 20) + 3);
  EXPECT_FALSE(f.fs_type.empty());
  EXPECT_FALSE(f.mount_point.empty());

  auto bounded = probe_storage(t / "data", 2.0, 2);
  EXPECT_EQ(bounded.files, 2);
  EXPECT_TRUE(bounded.count_truncated);

  auto one = probe_storage(t / "data/a/1.bin", 1.0, 10);
  EXPECT_EQ(one.files, 1);
  EXPECT_EQ(one.bytes, 1 << 20);
}

TEST(SystemStorage, MissingDirectoryIsOneLineError) {
  try {
    probe_storage("/nonexistent/dldoctor-data", 1.0, 10);
    FAIL() << "expected dldoctor::Error";
  } catch (const dldoctor::Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("/nonexistent/dldoctor-data"), std::string::npos);
    EXPECT_EQ(what.find('\n'), std::string::npos);
  }
}

// --- collect ---------------------------------------------------------------------------------

TEST(SystemCollect, MissingSourcesAreUnknownNotZero) {
  CollectOptions o;
  o.proc_root = "/nonexistent-proc";
  o.sys_root = "/nonexistent-sys";
  o.root = "/nonexistent-root";
  o.shm_path = "/nonexistent-shm";
  Facts f = collect(o);
  EXPECT_FALSE(f.memory.total_bytes);
  EXPECT_FALSE(f.memory.available_bytes);
  EXPECT_FALSE(f.memory.cgroup_usage_bytes);
  EXPECT_FALSE(f.shm.total_bytes);
  EXPECT_FALSE(f.shm.free_bytes);
  EXPECT_EQ(f.shm.fs_type, "");
  EXPECT_FALSE(f.limits.open_fds);
  EXPECT_FALSE(f.cpu.physical_cores);
  EXPECT_FALSE(f.cpu.cgroup_quota);
  EXPECT_EQ(f.cgroup_version, "");
  EXPECT_FALSE(f.in_container);
  EXPECT_FALSE(f.cpu_pressure_some_avg10);
  // The syscalls still answer.
  EXPECT_TRUE(f.cpu.affinity);
  EXPECT_EQ(f.cpu.usable, static_cast<double>(*f.cpu.affinity));
  EXPECT_TRUE(f.limits.nofile_soft || !f.limits.nofile_hard);
}

TEST(SystemCollect, RealMachineIsConsistent) {
  Facts f = collect();
  ASSERT_TRUE(f.cpu.usable);
  ASSERT_TRUE(f.cpu.affinity);
  EXPECT_LE(*f.cpu.usable, *f.cpu.affinity);
  EXPECT_LE(*f.cpu.affinity, f.cpu.online.value_or(*f.cpu.affinity));
  ASSERT_TRUE(f.memory.total_bytes);
  EXPECT_GT(*f.memory.total_bytes, 0);
  EXPECT_FALSE(f.cgroup_version.empty());
}
