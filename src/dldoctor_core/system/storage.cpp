#include "dldoctor_core/system/storage.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "dldoctor_core/common/error.hpp"
#include "dldoctor_core/system/file.hpp"
#include "dldoctor_core/system/mountinfo.hpp"

namespace dldoctor::system {

namespace {

using Clock = std::chrono::steady_clock;

// Filesystems whose every open/stat/read is a round trip to another machine.
constexpr std::array<std::string_view, 14> kNetworkFs = {
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph", "glusterfs",
    "afs", "9p", "orangefs", "pvfs2"};
// FUSE subtypes that are object stores or remote filesystems.
constexpr std::array<std::string_view, 16> kRemoteFuse = {
    "s3fs", "gcsfuse", "sshfs", "rclone", "goofys", "juicefs", "glusterfs", "ceph-fuse",
    "blobfuse", "blobfuse2", "mountpoint-s3", "alluxio-fuse", "geesefs", "davfs", "cephfs",
    "lustre"};
// Probe with the biggest files found: big sequential reads measure the device, not per-file
// latency, and a few dozen are enough to fill the time budget on any real disk.
constexpr size_t kProbeCandidates = 64;
// 1 MiB reads: large enough to reach a disk's sequential rate, small enough to stop on time.
constexpr size_t kProbeChunk = 1 << 20;
// O_DIRECT needs buffer, offset and length aligned to the logical block size; 4 KiB covers
// every common device.
constexpr size_t kDirectAlign = 4096;
// A bound on bytes read even on a very fast device, so the probe never streams a whole dataset.
constexpr int64_t kProbeMaxBytes = int64_t{1} << 30;

struct Candidate {
  int64_t size;
  std::string path;
};

struct Walk {
  int64_t files = 0, bytes = 0;
  bool truncated = false;
  std::vector<Candidate> largest;  // a min-heap on size, at most kProbeCandidates
};

void note_file(Walk& w, const std::string& path, int64_t size) {
  ++w.files;
  w.bytes += size;
  auto cmp = [](const Candidate& a, const Candidate& b) { return a.size > b.size; };
  if (size <= 0) return;
  if (w.largest.size() < kProbeCandidates) {
    w.largest.push_back({size, path});
    std::push_heap(w.largest.begin(), w.largest.end(), cmp);
  } else if (size > w.largest.front().size) {
    std::pop_heap(w.largest.begin(), w.largest.end(), cmp);
    w.largest.back() = {size, path};
    std::push_heap(w.largest.begin(), w.largest.end(), cmp);
  }
}

// Breadth of a dataset tree, without following directory symlinks (they can loop); a symlink
// to a file counts as the file, since loaders read through it.
Walk walk(const std::string& root, int64_t max_files, Clock::time_point deadline) {
  Walk w;
  std::vector<std::string> dirs{root};
  while (!dirs.empty()) {
    std::string dir = std::move(dirs.back());
    dirs.pop_back();
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) continue;  // an unreadable subdirectory: the loader cannot read it either
    DIR* d = ::fdopendir(dfd);
    if (!d) {
      ::close(dfd);
      continue;
    }
    while (struct dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      if (w.files >= max_files || Clock::now() >= deadline) {
        w.truncated = true;
        break;
      }
      std::string child = join_path(dir, e->d_name);
      if (e->d_type == DT_DIR) {
        dirs.push_back(std::move(child));
        continue;
      }
      struct stat st;
      if (::fstatat(dfd, e->d_name, &st, 0) != 0) continue;
      if (S_ISREG(st.st_mode)) {
        note_file(w, child, st.st_size);
      } else if (S_ISDIR(st.st_mode) && e->d_type == DT_UNKNOWN) {
        dirs.push_back(std::move(child));  // filesystems without d_type; symlinked dirs skipped
      }
    }
    ::closedir(d);
    if (w.truncated) break;
  }
  return w;
}

struct Probe {
  int64_t bytes = 0;
  double seconds = 0;
  bool cached = false;
};

// Reads one file from the start until EOF, the deadline or the byte bound. Returns bytes read.
int64_t probe_one_file(const std::string& path, char* buf, Clock::time_point deadline,
                            int64_t budget, bool& cached) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  bool direct = fd >= 0;
  if (!direct) {
    // tmpfs, some FUSE and overlay setups refuse O_DIRECT: ask the kernel to drop the file's
    // clean pages instead. That is best effort (mapped or dirty pages stay), so say so.
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    cached = true;
  }
  int64_t total = 0;
  while (total < budget && Clock::now() < deadline) {
    ssize_t n = ::read(fd, buf, kProbeChunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && direct && errno == EINVAL) {
      // Opened with O_DIRECT but the filesystem will not do it: continue through the cache.
      int flags = ::fcntl(fd, F_GETFL);
      if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_DIRECT) != 0) break;
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      direct = false;
      cached = true;
      continue;
    }
    if (n <= 0) break;
    total += n;
  }
  ::close(fd);
  return total;
}

Probe probe_reads(std::vector<Candidate> files, Clock::time_point deadline) {
  Probe p;
  std::sort(files.begin(), files.end(),
            [](const Candidate& a, const Candidate& b) { return a.size > b.size; });
  void* raw = nullptr;
  if (::posix_memalign(&raw, kDirectAlign, kProbeChunk) != 0) return p;
  std::unique_ptr<char, decltype(&std::free)> buf(static_cast<char*>(raw), &std::free);
  auto start = Clock::now();
  for (const auto& f : files) {
    if (Clock::now() >= deadline || p.bytes >= kProbeMaxBytes) break;
    p.bytes += probe_one_file(f.path, buf.get(), deadline, kProbeMaxBytes - p.bytes, p.cached);
  }
  p.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return p;
}

bool source_looks_remote(std::string_view source) {
  if (source.find("://") != std::string_view::npos) return true;  // s3://bucket, gs://...
  if (source.substr(0, 2) == "//") return true;                    // //server/share
  auto colon = source.find(':');
  // host:/export or user@host:path, but not a bare "C:" or a device path
  return colon != std::string_view::npos && colon > 0 && source.front() != '/';
}

}  // namespace

bool is_network_fs(std::string_view fs_type, std::string_view source) {
  for (auto t : kNetworkFs)
    if (fs_type == t) return true;
  if (fs_type.substr(0, 5) == "fuse." || fs_type == "fuse" || fs_type == "fuseblk") {
    std::string_view sub = fs_type.size() > 5 ? fs_type.substr(5) : std::string_view{};
    for (auto t : kRemoteFuse)
      if (sub == t || source == t) return true;
    return source_looks_remote(source);
  }
  return false;
}

std::string block_device_name(const std::string& device_numbers, const std::string& sys_root) {
  if (device_numbers.empty()) return "";
  std::string link = join_path(sys_root, "dev/block/" + device_numbers);
  char resolved[PATH_MAX];
  if (!::realpath(link.c_str(), resolved)) return "";
  std::string real(resolved);
  // A partition's sysfs directory sits inside its disk's and has a "partition" attribute.
  if (path_exists(join_path(real, "partition"))) {
    auto slash = real.find_last_of('/');
    if (slash == std::string::npos || slash == 0) return "";
    real.resize(slash);
  }
  auto slash = real.find_last_of('/');
  return slash == std::string::npos ? real : real.substr(slash + 1);
}

std::optional<bool> read_rotational(const std::string& disk, const std::string& sys_root) {
  if (disk.empty()) return std::nullopt;
  auto v = read_int(join_path(sys_root, "block/" + disk + "/queue/rotational"));
  if (!v) return std::nullopt;
  return *v != 0;
}

StorageFacts probe_storage(const std::string& path, double max_seconds, int64_t max_files,
                           const std::string& proc_root, const std::string& sys_root) {
  auto start = Clock::now();
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR)
      throw Error("data directory not found: " + path);
    throw Error("cannot read data directory " + path + ": " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode) && ::access(path.c_str(), R_OK | X_OK) != 0)
    throw Error("cannot read data directory " + path + ": " + std::strerror(errno));

  StorageFacts f;
  f.path = path;
  char resolved[PATH_MAX];
  std::string real = ::realpath(path.c_str(), resolved) ? std::string(resolved) : path;
  auto mounts = read_mountinfo(proc_root);
  if (const Mount* m = find_mount(mounts, real)) {
    f.mount_point = m->mount_point;
    f.fs_type = m->fs_type;
    f.source = m->source;
    f.device_numbers = m->device_numbers;
    f.network_fs = is_network_fs(m->fs_type, m->source);
    f.block_device = block_device_name(m->device_numbers, sys_root);
    f.rotational = read_rotational(f.block_device, sys_root);
  }

  auto budget = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::max(0.0, max_seconds)));
  Walk w;
  if (S_ISDIR(st.st_mode)) {
    w = walk(real, std::max<int64_t>(0, max_files), start + budget / 2);
  } else if (S_ISREG(st.st_mode)) {
    note_file(w, real, st.st_size);
  }
  f.files = w.files;
  f.bytes = w.bytes;
  f.count_truncated = w.truncated;

  Probe p = probe_reads(std::move(w.largest), start + budget);
  if (p.bytes > 0 && p.seconds > 0) {
    f.read_mb_s = static_cast<double>(p.bytes) / 1e6 / p.seconds;
    f.probe_bytes = p.bytes;
  }
  // tmpfs accepts O_DIRECT since Linux 6.6, but its files are page cache: the rate is memory's.
  f.probe_cached = p.cached || f.fs_type == "tmpfs" || f.fs_type == "ramfs";
  return f;
}

}  // namespace dldoctor::system
