// Tables checked against linux-libc-dev's asm/unistd_64.h (x86_64) and asm-generic/unistd.h
// (aarch64, which has no poll/select/epoll_wait/pause: libc routes those to ppoll/pselect6/
// epoll_pwait, so a blocked aarch64 process shows the p-variants).
#include "dldoctor_core/watchdog/syscall_name.hpp"

#include <algorithm>
#include <array>
#include <string_view>

namespace dldoctor::watchdog {
namespace {

struct Entry {
  int nr;
  const char* name;
};

constexpr Entry kX86_64[] = {
    {0, "read"},           {1, "write"},           {2, "open"},
    {3, "close"},          {5, "fstat"},           {7, "poll"},
    {8, "lseek"},          {9, "mmap"},            {11, "munmap"},
    {16, "ioctl"},         {17, "pread64"},        {18, "pwrite64"},
    {19, "readv"},         {20, "writev"},         {23, "select"},
    {24, "sched_yield"},   {26, "msync"},          {28, "madvise"},
    {34, "pause"},         {35, "nanosleep"},      {40, "sendfile"},
    {42, "connect"},       {43, "accept"},         {44, "sendto"},
    {45, "recvfrom"},      {46, "sendmsg"},        {47, "recvmsg"},
    {56, "clone"},         {60, "exit"},           {61, "wait4"},
    {65, "semop"},         {70, "msgrcv"},         {73, "flock"},
    {74, "fsync"},         {75, "fdatasync"},      {77, "ftruncate"},
    {128, "rt_sigtimedwait"}, {130, "rt_sigsuspend"}, {162, "sync"},
    {202, "futex"},        {208, "io_getevents"},  {217, "getdents64"},
    {220, "semtimedop"},   {230, "clock_nanosleep"}, {231, "exit_group"},
    {232, "epoll_wait"},   {247, "waitid"},        {257, "openat"},
    {262, "newfstatat"},   {270, "pselect6"},      {271, "ppoll"},
    {275, "splice"},       {281, "epoll_pwait"},   {285, "fallocate"},
    {288, "accept4"},      {332, "statx"},         {426, "io_uring_enter"},
    {435, "clone3"},       {441, "epoll_pwait2"},  {449, "futex_waitv"},
};

constexpr Entry kAarch64[] = {
    {4, "io_getevents"},   {22, "epoll_pwait"},    {29, "ioctl"},
    {32, "flock"},         {46, "ftruncate"},      {47, "fallocate"},
    {56, "openat"},        {57, "close"},          {61, "getdents64"},
    {62, "lseek"},         {63, "read"},           {64, "write"},
    {65, "readv"},         {66, "writev"},         {67, "pread64"},
    {68, "pwrite64"},      {71, "sendfile"},       {72, "pselect6"},
    {73, "ppoll"},         {76, "splice"},         {79, "newfstatat"},
    {80, "fstat"},         {81, "sync"},           {82, "fsync"},
    {83, "fdatasync"},     {93, "exit"},           {94, "exit_group"},
    {95, "waitid"},        {98, "futex"},          {101, "nanosleep"},
    {115, "clock_nanosleep"}, {124, "sched_yield"}, {133, "rt_sigsuspend"},
    {137, "rt_sigtimedwait"}, {188, "msgrcv"},     {192, "semtimedop"},
    {193, "semop"},        {202, "accept"},        {203, "connect"},
    {206, "sendto"},       {207, "recvfrom"},      {211, "sendmsg"},
    {212, "recvmsg"},      {215, "munmap"},        {220, "clone"},
    {222, "mmap"},         {227, "msync"},         {233, "madvise"},
    {242, "accept4"},      {260, "wait4"},         {291, "statx"},
    {426, "io_uring_enter"}, {435, "clone3"},      {441, "epoll_pwait2"},
    {449, "futex_waitv"},
};

template <size_t N>
const char* find(const Entry (&table)[N], int64_t nr) {
  for (const Entry& e : table) {
    if (e.nr == nr) return e.name;
  }
  return nullptr;
}

}  // namespace

Arch native_arch() noexcept {
#if defined(__aarch64__)
  return Arch::kAarch64;
#else
  return Arch::kX86_64;
#endif
}

std::string syscall_name(int64_t nr, Arch arch) {
  const char* name = arch == Arch::kAarch64 ? find(kAarch64, nr) : find(kX86_64, nr);
  if (name != nullptr) return name;
  return "syscall_" + std::to_string(nr);
}

bool syscall_takes_fd(const std::string& name) noexcept {
  static constexpr std::array<std::string_view, 16> kFdFirst = {
      "read",    "write",    "pread64", "pwrite64", "readv",     "writev",
      "recvfrom", "recvmsg", "sendto",  "sendmsg",  "fsync",     "fdatasync",
      "flock",   "accept",   "accept4", "connect"};
  return std::find(kFdFirst.begin(), kFdFirst.end(), std::string_view(name)) != kFdFirst.end();
}

}  // namespace dldoctor::watchdog
