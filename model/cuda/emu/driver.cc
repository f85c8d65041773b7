// libcuda.so.1 on the CPU: the driver API entry points swetui binds
// (model/cuda/driver.go), with the CUDA semantics they claim: per-thread
// current contexts, sticky faults, launch limits, and every block of a
// grid run as cooperative fibers. Two checks a GPU does not give:
//   memcheck  every allocation ends at a guard page (and a freed one stays
//             unmapped a while), so an access past its end or after its
//             free faults; the fault is reported with the kernel's name
//             and fails the launch (CUDA_ERROR_ILLEGAL_ADDRESS, sticky).
//   racecheck each launch runs twice, a block's threads in forward and in
//             reverse order between barriers; any difference in the
//             memory it wrote (words updated by atomics aside) is a race.
// Settings (environment): CUDAEMU_MEM_MB (device memory, default 8192),
// CUDAEMU_DEVICES (default 1), CUDAEMU_CC (default 80),
// CUDAEMU_RACECHECK (1 default, 0 off), CUDAEMU_RACECHECK_MAX_MB (skip
// launches whose buffers exceed it, default 256), CUDAEMU_STACK_KB.
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "cudaemu.h"
#define CUDAEMU_RUNTIME
#include "cudaemu_device.h"
#include "fiber.h"

typedef int CUresult;
enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
  CUDA_ERROR_LAUNCH_FAILED = 719,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_UNKNOWN = 999,
};

static const struct {
  int code;
  const char* name;
} kErrNames[] = {
    {0, "CUDA_SUCCESS"},
    {1, "CUDA_ERROR_INVALID_VALUE"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY"},
    {3, "CUDA_ERROR_NOT_INITIALIZED"},
    {100, "CUDA_ERROR_NO_DEVICE"},
    {101, "CUDA_ERROR_INVALID_DEVICE"},
    {200, "CUDA_ERROR_INVALID_IMAGE"},
    {201, "CUDA_ERROR_INVALID_CONTEXT"},
    {400, "CUDA_ERROR_INVALID_HANDLE"},
    {500, "CUDA_ERROR_NOT_FOUND"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
    {719, "CUDA_ERROR_LAUNCH_FAILED"},
    {801, "CUDA_ERROR_NOT_SUPPORTED"},
    {999, "CUDA_ERROR_UNKNOWN"},
};

// ---- settings ----

static long env_long(const char* k, long def) {
  const char* v = getenv(k);
  if (!v || !*v) return def;
  char* end;
  long x = strtol(v, &end, 10);
  return *end ? def : x;
}

static const int kMaxDevices = 16;
static const unsigned kSharedPerBlock = 48 * 1024;  // without opt-in, every arch since sm_20

// ---- state: one lock for everything (the emulator is test infrastructure) ----

static std::recursive_mutex g_mu;
static bool g_init;
static int g_devices = 1;
static int g_cc = 80;
static uint64_t g_total;
static size_t g_page;

struct Ctx {
  int dev;
  int refs;
  CUresult sticky;  // a fault poisons the context until it is destroyed
  char report[4096];  // what poisoned it
};
static Ctx g_ctx[kMaxDevices];
static thread_local Ctx* t_cur;

struct Alloc {
  uint64_t base, size;
  char* map;
  size_t map_len;
  int dev;
};
static std::map<uint64_t, Alloc> g_live;  // by base
static std::deque<Alloc> g_freed;        // unmapped later, so a use after free faults
static uint64_t g_freed_bytes;
static uint64_t g_used[kMaxDevices];

static char g_report[4096];

// cudaemuReport is what the last failed call found: a poisoned context's
// fault for as long as it lasts, otherwise once (reading clears it), so an
// old report never explains a later error.
extern "C" const char* cudaemuReport() {
  static thread_local std::string out;
  std::lock_guard<std::recursive_mutex> g(g_mu);
  if (t_cur && t_cur->sticky) return t_cur->report;
  out = g_report;
  g_report[0] = 0;
  return out.c_str();
}

static void report(const char* fmt, va_list ap) {
  vsnprintf(g_report, sizeof g_report, fmt, ap);
  fprintf(stderr, "cudaemu: %s\n", g_report);
}

extern "C" void cudaemu_fail(int result, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  report(fmt, ap);
  va_end(ap);
  if (t_cur && t_cur->sticky == 0) {
    t_cur->sticky = result;
    memcpy(t_cur->report, g_report, sizeof g_report);
  }
}

static void note(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  report(fmt, ap);
  va_end(ap);
}

static CUresult ready() {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (!t_cur || t_cur->refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  return t_cur->sticky;
}

extern "C" int cudaemu_current_ok() { return ready() == CUDA_SUCCESS; }

// find returns the live allocation holding [p, p+n), with why set when none.
static const Alloc* find(uint64_t p, uint64_t n, const char** why) {
  auto it = g_live.upper_bound(p);
  if (it != g_live.begin()) {
    --it;
    const Alloc& a = it->second;
    if (p >= a.base && p <= a.base + a.size) {
      if (n <= a.base + a.size - p) {
        if (t_cur && a.dev != t_cur->dev) {
          *why = "belongs to another device";
          return nullptr;
        }
        return &a;
      }
      *why = "runs past the end of its allocation";
      return nullptr;
    }
  }
  for (const Alloc& a : g_freed)
    if (p >= a.base && p < a.base + a.size) {
      *why = "is in freed memory";
      return nullptr;
    }
  *why = "is not device memory this emulator handed out";
  return nullptr;
}

extern "C" int cudaemu_check_range(uint64_t p, uint64_t n, const char** why) {
  std::lock_guard<std::recursive_mutex> g(g_mu);
  return find(p, n, why) != nullptr;
}

extern "C" int cudaemu_check_range_dev(uint64_t p, uint64_t n, int dev, const char** why) {
  std::lock_guard<std::recursive_mutex> g(g_mu);
  Ctx* saved = t_cur;
  t_cur = (dev >= 0 && dev < kMaxDevices) ? &g_ctx[dev] : nullptr;
  bool ok = find(p, n, why) != nullptr;
  t_cur = saved;
  return ok;
}

extern "C" int cudaemu_device_count() {
  std::lock_guard<std::recursive_mutex> g(g_mu);
  return g_init ? g_devices : -1;
}

extern "C" int cudaemu_device_state(int dev) {
  std::lock_guard<std::recursive_mutex> g(g_mu);
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev < 0 || dev >= g_devices) return CUDA_ERROR_INVALID_DEVICE;
  if (g_ctx[dev].refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  return g_ctx[dev].sticky;
}

// ---- init, devices, contexts ----

extern "C" CUresult cuInit(unsigned flags) {
  std::lock_guard<std::recursive_mutex> g(g_mu);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!g_init) {
    g_devices = (int)env_long("CUDAEMU_DEVICES", 1);
    if (g_devices < 0) g_devices = 0;
    if (g_devices > kMaxDevices) g_devices = kMaxDevices;
    g_cc = (int)env_long("CUDAEMU_CC", 80);
    g_total = (uint64_t)env_long("CUDAEMU_MEM_MB", 8192) << 20;
    g_page = (size_t)sysconf(_SC_PAGESIZE);
    for (int i = 0; i < kMaxDevices; i++) g_ctx[i] = Ctx{i, 0, 0, {0}};
    g_init = true;
  }
  return g_devices == 0 ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
}

extern "C" CUresult cuDriverGetVersion(int* v) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *v = 12080;
  return CUDA_SUCCESS;
}

extern "C" CUresult cuDeviceGetCount(int* n) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  *n = g_devices;
  return CUDA_SUCCESS;
}

extern "C" CUresult cuDeviceGet(int* dev, int ordinal) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (!dev) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= g_devices) return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}

static bool valid_dev(int dev) { return dev >= 0 && dev < g_devices; }

extern "C" CUresult cuDeviceGetName(char* name, int n, int dev) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (!name || n <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, (size_t)n, "cudaemu %d (CPU emulation, not a GPU; sm_%d)", dev, g_cc);
  return CUDA_SUCCESS;
}

extern "C" CUresult cuDeviceTotalMem_v2(size_t* bytes, int dev) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = g_total;
  return CUDA_SUCCESS;
}

// Attribute numbers from the CUdevice_attribute enum.
extern "C" CUresult cuDeviceGetAttribute(int* v, int attr, int dev) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
  switch (attr) {
    case 1: *v = 1024; break;                       // MAX_THREADS_PER_BLOCK
    case 2: case 3: *v = 1024; break;               // MAX_BLOCK_DIM_X, _Y
    case 4: *v = 64; break;                         // MAX_BLOCK_DIM_Z
    case 5: *v = 0x7fffffff; break;                 // MAX_GRID_DIM_X
    case 6: case 7: *v = 65535; break;              // MAX_GRID_DIM_Y, _Z
    case 8: *v = (int)kSharedPerBlock; break;       // MAX_SHARED_MEMORY_PER_BLOCK
    case 10: *v = 32; break;                        // WARP_SIZE
    case 16: *v = 1; break;                         // MULTIPROCESSOR_COUNT
    case 75: *v = g_cc / 10; break;                 // COMPUTE_CAPABILITY_MAJOR
    case 76: *v = g_cc % 10; break;                 // COMPUTE_CAPABILITY_MINOR
    case 97: *v = 163 * 1024; break;                // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

static void free_alloc_locked(const Alloc& a);
static void print_prof();

extern "C" CUresult cuDevicePrimaryCtxRetain(void** ctx, int dev) {
  std::lock_guard<std::recursive_mutex> g(g_mu);
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
  g_ctx[dev].refs++;
  *ctx = &g_ctx[dev];
  return CUDA_SUCCESS;
}

// The last release destroys the context: its memory is freed and its
// sticky error cleared, as a fresh primary context starts clean.
extern "C" CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
  std::lock_guard<std::recursive_mutex> g(g_mu);
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Ctx& c = g_ctx[dev];
  if (c.refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--c.refs == 0) {
    std::vector<Alloc> mine;
    for (auto& kv : g_live)
      if (kv.second.dev == dev) mine.push_back(kv.second);
    for (auto& a : mine) free_alloc_locked(a);
    c.sticky = 0;
    c.report[0] = 0;
    print_prof();
  }
  return CUDA_SUCCESS;
}

extern "C" CUresult cuCtxSetCurrent(void* ctx) {
  std::lock_guard<std::recursive_mutex> g(g_mu);
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ctx) {
    t_cur = nullptr;
    return CUDA_SUCCESS;
  }
  Ctx* c = (Ctx*)ctx;
  if (c < g_ctx || c >= g_ctx + kMaxDevices || c->refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  t_cur = c;
  return CUDA_SUCCESS;
}

extern "C" CUresult cuCtxGetCurrent(void** ctx) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  *ctx = t_cur;
  return CUDA_SUCCESS;
}

// Work runs at the launch, so synchronising reports what it left.
extern "C" CUresult cuCtxSynchronize() {
  std::lock_guard<std::recursive_mutex> g(g_mu);
  return ready();
}

// ---- memory ----

// An allocation ends exactly at a PROT_NONE page, with another before it.
extern "C" CUresult cuMemAlloc_v2(uint64_t* p, size_t n) {
  std::lock_guard<std::recursive_mutex> g(g_mu);
  if (CUresult r = ready()) return r;
  if (!p || n == 0) return CUDA_ERROR_INVALID_VALUE;
  int dev = t_cur->dev;
  if (n > g_total - g_used[dev]) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t data = (n + g_page - 1) / g_page * g_page;
  size_t len = data + 2 * g_page;
  void* m = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  if (mprotect((char*)m + g_page, data, PROT_READ | PROT_WRITE) != 0) {
    munmap(m, len);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Alloc a{(uint64_t)((char*)m + g_page + data - n), n, (char*)m, len, dev};
  g_live[a.base] = a;
  g_used[dev] += n;
  *p = a.base;
  return CUDA_SUCCESS;
}

static void free_alloc_locked(const Alloc& a) {
  g_used[a.dev] -= a.size;
  g_live.erase(a.base);
  mprotect(a.map, a.map_len, PROT_NONE);
  g_freed.push_back(a);
  g_freed_bytes += a.map_len;
  uint64_t keep = (uint64_t)env_long("CUDAEMU_QUARANTINE_MB", 512) << 20;
  while (g_freed_bytes > keep && !g_freed.empty()) {
    munmap(g_freed.front().map, g_freed.front().map_len);
    g_freed_bytes -= g_freed.front().map_len;
    g_freed.pop_front();
  }
}

extern "C" CUresult cuMemFree_v2(uint64_t p) {
  std::lock_guard<std::recursive_mutex> g(g_mu);
  if (CUresult r = ready()) return r;
  if (p == 0) return CUDA_SUCCESS;
  auto it = g_live.find(p);
  if (it == g_live.end() || it->second.dev != t_cur->dev) {
    const char* why;
    find(p, 1, &why);
    note("cuMemFree(0x%llx): not the start of a live allocation (%s)", (unsigned long long)p, why);
    return CUDA_ERROR_INVALID_VALUE;
  }
  free_alloc_locked(it->second);
  return CUDA_SUCCESS;
}

extern "C" CUresult cuMemGetInfo_v2(size_t* free_, size_t* total) {
  std::lock_guard<std::recursive_mutex> g(g_mu);
  if (CUresult r = ready()) return r;
  if (!free_ || !total) return CUDA_ERROR_INVALID_VALUE;
  *total = g_total;
  *free_ = g_total - g_used[t_cur->dev];
  return CUDA_SUCCESS;
}

static CUresult check_dev(const char* op, uint64_t p, size_t n) {
  const char* why;
  if (n == 0 || find(p, n, &why)) return CUDA_SUCCESS;
  note("%s: [0x%llx, +%zu) %s", op, (unsigned long long)p, n, why);
  return CUDA_ERROR_INVALID_VALUE;
}

extern "C" CUresult cuMemcpyHtoD_v2(uint64_t dst, const void* src, size_t n) {
  std::lock_guard<std::recursive_mutex> g(g_mu);
  if (CUresult r = ready()) return r;
  if (CUresult r = check_dev("cuMemcpyHtoD", dst, n)) return r;
  if (n && !src) return CUDA_ERROR_INVALID_VALUE;
  if (n) memcpy((void*)dst, src, n);
  return CUDA_SUCCESS;
}

extern "C" CUresult cuMemcpyDtoH_v2(void* dst, uint64_t src, size_t n) {
  std::lock_guard<std::recursive_mutex> g(g_mu);
  if (CUresult r = ready()) return r;
  if (CUresult r = check_dev("cuMemcpyDtoH", src, n)) return r;
  if (n && !dst) return CUDA_ERROR_INVALID_VALUE;
  if (n) memcpy(dst, (void*)src, n);
  return CUDA_SUCCESS;
}

extern "C" CUresult cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t n, void* stream) {
  std::lock_guard<std::recursive_mutex> g(g_mu);
  if (CUresult r = ready()) return r;
  if (stream) return CUDA_ERROR_INVALID_HANDLE;  // only the null stream exists here
  if (CUresult r = check_dev("cuMemcpyDtoDAsync (destination)", dst, n)) return r;
  if (CUresult r = check_dev("cuMemcpyDtoDAsync (source)", src, n)) return r;
  if (n) memmove((void*)dst, (void*)src, n);
  return CUDA_SUCCESS;
}

extern "C" CUresult cuMemsetD8Async(uint64_t dst, unsigned char v, size_t n, void* stream) {
  std::lock_guard<std::recursive_mutex> g(g_mu);
  if (CUresult r = ready()) return r;
  if (stream) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = check_dev("cuMemsetD8Async", dst, n)) return r;
  if (n) memset((void*)dst, v, n);
  return CUDA_SUCCESS;
}

// ---- modules ----

struct Function;
struct Module {
  void* dl;
  int fd;
  cudaemu_state* state;
  uintptr_t base;  // load address, for the statics' symbol values
  std::vector<cudaemu_static> statics;
  std::map<std::string, Function*> fns;
};

struct Function {
  Module* mod;
  std::string name;
  void (*run)(void**);
  int nargs;
  int sizes[64], ptrs[64];
  std::vector<std::pair<char*, size_t>> shared;  // its statics: poisoned before each block
  size_t shared_bytes;
};

static std::vector<Module*> g_mods;

extern "C" CUresult cuModuleLoadData(void** mod, const void* image) {
  std::lock_guard<std::recursive_mutex> g(g_mu);
  if (CUresult r = ready()) return r;
  if (!mod || !image) return CUDA_ERROR_INVALID_VALUE;
  // An image is an x86-64 ELF shared object from the emulated NVRTC; its
  // section headers end the file, so the header gives its size.
  std::vector<cudaemu_static> statics;
  size_t size = 0;
  if (!cudaemu_elf_statics((const unsigned char*)image, 1 << 30, nullptr, &size) ||
      !cudaemu_elf_statics((const unsigned char*)image, size, &statics, nullptr)) {
    note("cuModuleLoadData: not a module of the emulated NVRTC (a GPU's PTX or cubin cannot run here)");
    return CUDA_ERROR_INVALID_IMAGE;
  }
  int fd = memfd_create("cudaemu-module", MFD_CLOEXEC);
  char path[64];
  if (fd < 0) return CUDA_ERROR_UNKNOWN;
  if (write(fd, image, size) != (ssize_t)size) {
    close(fd);
    return CUDA_ERROR_UNKNOWN;
  }
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  void* dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    note("cuModuleLoadData: %s", dlerror());
    close(fd);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  Module* m = new Module{dl, fd, (cudaemu_state*)dlsym(dl, "__cudaemu"), 0, statics, {}};
  struct link_map* lm = nullptr;
  if (!m->state || dlinfo(dl, RTLD_DI_LINKMAP, &lm) != 0 || !lm) {
    dlclose(dl);
    close(fd);
    delete m;
    return CUDA_ERROR_INVALID_IMAGE;
  }
  m->base = lm->l_addr;
  g_mods.push_back(m);
  *mod = m;
  return CUDA_SUCCESS;
}

static bool live_module(Module* m) {
  for (Module* x : g_mods)
    if (x == m) return true;
  return false;
}

extern "C" CUresult cuModuleUnload(void* mod) {
  std::lock_guard<std::recursive_mutex> g(g_mu);
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  Module* m = (Module*)mod;
  if (!live_module(m)) return CUDA_ERROR_INVALID_HANDLE;
  for (size_t i = 0; i < g_mods.size(); i++)
    if (g_mods[i] == m) g_mods.erase(g_mods.begin() + (long)i);
  for (auto& kv : m->fns) delete kv.second;
  dlclose(m->dl);
  close(m->fd);
  delete m;
  return CUDA_SUCCESS;
}

extern "C" CUresult cuModuleGetFunction(void** fn, void* mod, const char* name) {
  std::lock_guard<std::recursive_mutex> g(g_mu);
  if (CUresult r = ready()) return r;
  Module* m = (Module*)mod;
  if (!fn || !name) return CUDA_ERROR_INVALID_VALUE;
  if (!live_module(m)) return CUDA_ERROR_INVALID_HANDLE;
  auto it = m->fns.find(name);
  if (it != m->fns.end()) {
    *fn = it->second;
    return CUDA_SUCCESS;
  }
  std::string run = std::string("cudaemu_run_") + name, args = std::string("cudaemu_args_") + name;
  void* r = dlsym(m->dl, run.c_str());
  int (*a)(int*, int*, int) = (int (*)(int*, int*, int))dlsym(m->dl, args.c_str());
  if (!r || !a) return CUDA_ERROR_NOT_FOUND;
  Function* f = new Function{};
  f->mod = m;
  f->name = name;
  f->run = (void (*)(void**))r;
  f->nargs = a(f->sizes, f->ptrs, 64);
  for (const cudaemu_static& s : m->statics)
    if (s.kernel == name) {
      f->shared.push_back({(char*)(m->base + s.value), (size_t)s.size});
      f->shared_bytes += s.size;
    }
  m->fns[name] = f;
  *fn = f;
  return CUDA_SUCCESS;
}

// ---- launches ----

enum State { NEW, READY, AT_BARRIER, AT_SHUFFLE, DONE };

struct Block {
  int nt;  // threads
  unsigned bx, by;
  std::vector<unsigned char> state;
  std::vector<uint3> tid;  // each thread's threadIdx
  std::vector<cudaemu_fiber*> fiber;  // the fiber holding each suspended thread
  // Warp exchange: two buffers a warp, used in turn, so a lane that runs
  // ahead into the next shuffle cannot overwrite what a slower lane reads.
  std::vector<uint64_t> xbuf;  // [warp][2][32]
  std::vector<unsigned> xgen;  // [warp]
  int cur;
};

static Block g_blk;
static Function* g_fn;
static void** g_params;
static std::vector<cudaemu_fiber*> g_pool, g_free;
static void* g_sched_sp;
static cudaemu_fiber* g_running;
static std::string g_fail;  // why the block stopped, "" when it ran
static std::unordered_set<uint64_t> g_atomic;
static thread_local sigjmp_buf* t_fault_jmp;
static thread_local volatile uint64_t t_fault_addr;
static thread_local volatile int t_fault_write;

static void set_thread(int t) { g_fn->mod->state->threadIdx = g_blk.tid[(size_t)t]; }

static void yield(int st) {
  g_blk.state[g_blk.cur] = (unsigned char)st;
  cudaemu_fiber* f = g_running;
  cudaemu_switch(&f->sp, g_sched_sp);
}

static void fiber_main(cudaemu_fiber* f) {
  for (;;) {
    g_fn->run(g_params);
    g_blk.state[f->thread] = DONE;
    cudaemu_switch(&f->sp, g_sched_sp);
  }
}

static void rt_barrier() { yield(AT_BARRIER); }

static void rt_shuffle(void* v, unsigned size, unsigned x, int width, unsigned mask) {
  int t = g_blk.cur, warp = t / 32, lane = t % 32;
  if (width <= 0 || width > 32 || (width & (width - 1)) != 0) {
    g_fail = "a warp shuffle with width " + std::to_string(width) + " (a power of two up to 32)";
    yield(DONE);
  }
  if (!(mask >> lane & 1u)) {
    g_fail = "lane " + std::to_string(lane) + " shuffles with a mask that leaves it out";
    yield(DONE);
  }
  unsigned gen = g_blk.xgen[warp];
  uint64_t* buf = &g_blk.xbuf[((size_t)warp * 2 + (gen & 1)) * 32];
  memcpy(&buf[lane], v, size);
  yield(AT_SHUFFLE);
  int src = lane ^ (int)x;
  if (src / width > lane / width || src >= 32) return;  // a later group: its own value, as the device
  int st = warp * 32 + src;
  if (!(mask >> src & 1u)) return;
  if (st >= g_blk.nt) {
    g_fail = "thread " + std::to_string(t) + " shuffles from lane " + std::to_string(src) + ", which does not exist";
    yield(DONE);
  }
  memcpy(v, &buf[src], size);
}

static void rt_atomic_note(void* p, unsigned size) {
  uint64_t a = (uint64_t)p;
  for (unsigned i = 0; i < size; i += 4) g_atomic.insert(a + i);
}

static const cudaemu_runtime kPlain = {rt_barrier, rt_shuffle, nullptr};
static const cudaemu_runtime kRace = {rt_barrier, rt_shuffle, rt_atomic_note};

static cudaemu_fiber* take_fiber() {
  if (!g_free.empty()) {
    cudaemu_fiber* f = g_free.back();
    g_free.pop_back();
    return f;
  }
  cudaemu_fiber* f = cudaemu_fiber_new((size_t)env_long("CUDAEMU_STACK_KB", 256) << 10, fiber_main);
  if (f) g_pool.push_back(f);
  return f;
}

// reset_fibers restarts every fiber: after a fault or a deadlock some
// were left inside a kernel.
static void reset_fibers() {
  g_free.clear();
  for (cudaemu_fiber* f : g_pool) {
    cudaemu_fiber_reset(f, fiber_main);
    g_free.push_back(f);
  }
}

static void resume(int t) {
  Block& b = g_blk;
  cudaemu_fiber* f = b.fiber[t];
  if (!f) {
    f = take_fiber();
    if (!f) {
      g_fail = "out of memory for the threads' stacks";
      return;
    }
    f->thread = t;
    b.fiber[t] = f;
  }
  b.cur = t;
  set_thread(t);
  g_running = f;
  cudaemu_switch(&g_sched_sp, f->sp);
  if (b.state[t] == DONE) {
    f->thread = -1;
    b.fiber[t] = nullptr;
    g_free.push_back(f);
  }
}

// run_block runs one block to its end; "" or why it failed.
static void run_block(bool reverse) {
  Block& b = g_blk;
  std::fill(b.state.begin(), b.state.end(), NEW);
  std::fill(b.fiber.begin(), b.fiber.end(), nullptr);
  std::fill(b.xgen.begin(), b.xgen.end(), 0u);
  int nt = b.nt, warps = (nt + 31) / 32;
  for (;;) {
    for (int i = 0; i < nt && g_fail.empty(); i++) {
      int t = reverse ? nt - 1 - i : i;
      if (b.state[t] == NEW || b.state[t] == READY) resume(t);
    }
    if (!g_fail.empty()) return;
    bool released = false, all_done = true, all_barrier = true;
    for (int w = 0; w < warps; w++) {
      bool waiting = false, ready = true;
      for (int t = w * 32; t < nt && t < w * 32 + 32; t++) {
        if (b.state[t] == AT_SHUFFLE) waiting = true;
        else if (b.state[t] != DONE) ready = false;
      }
      if (waiting && ready) {
        for (int t = w * 32; t < nt && t < w * 32 + 32; t++)
          if (b.state[t] == AT_SHUFFLE) b.state[t] = READY;
        b.xgen[w]++;
        released = true;
      }
    }
    if (released) continue;
    for (int t = 0; t < nt; t++) {
      if (b.state[t] != DONE) all_done = false;
      if (b.state[t] != DONE && b.state[t] != AT_BARRIER) all_barrier = false;
    }
    if (all_done) return;
    if (all_barrier) {
      for (int t = 0; t < nt; t++)
        if (b.state[t] == AT_BARRIER) b.state[t] = READY;
      continue;
    }
    g_fail = "deadlock: some threads wait at __syncthreads while others wait at a warp shuffle";
    return;
  }
}

// Racecheck's write tracking: the pointer arguments' allocations are
// read-only while a launch runs; a kernel's first write to a page faults,
// the page's bytes are kept in saved (at the page's offset) and the page
// opened. So a launch costs what it writes, not what its buffers hold.
struct Tracked {
  const Alloc* a;
  char* lo;                    // first data page
  size_t pages;
  char* saved;                 // the pages as they were before their first write
  char* first;                 // the forward run's pages
  std::vector<unsigned char> dirty, dirty1;
};
static std::vector<Tracked> g_tracked;
static bool g_tracking;

static Tracked* tracked_page(uint64_t a, size_t* page) {
  for (Tracked& t : g_tracked)
    if (a >= (uint64_t)t.lo && a < (uint64_t)t.lo + t.pages * g_page) {
      *page = (size_t)((a - (uint64_t)t.lo) / g_page);
      return &t;
    }
  return nullptr;
}

static struct sigaction g_old_segv, g_old_bus;
static bool g_handlers;

static void on_fault(int sig, siginfo_t* info, void* uc) {
  if (t_fault_jmp) {
    t_fault_addr = (uint64_t)info->si_addr;
#if defined(__x86_64__)
    t_fault_write = (((ucontext_t*)uc)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#endif
    size_t pg;
    Tracked* t;
    if (g_tracking && t_fault_write && (t = tracked_page(t_fault_addr, &pg)) != nullptr && !t->dirty[pg]) {
      char* p = t->lo + pg * g_page;
      memcpy(t->saved + pg * g_page, p, g_page);
      t->dirty[pg] = 1;
      mprotect(p, g_page, PROT_READ | PROT_WRITE);
      return;  // the write runs again, now allowed
    }
    sigjmp_buf* j = t_fault_jmp;
    t_fault_jmp = nullptr;
    siglongjmp(*j, 1);
  }
  // Not a kernel's: the handler that was there before (Go's) takes it.
  struct sigaction* old = sig == SIGSEGV ? &g_old_segv : &g_old_bus;
  if (old->sa_flags & SA_SIGINFO) {
    old->sa_sigaction(sig, info, uc);
  } else if (old->sa_handler == SIG_DFL) {
    sigaction(sig, old, nullptr);
    raise(sig);
  } else if (old->sa_handler != SIG_IGN) {
    old->sa_handler(sig);
  }
}

static void install_handlers() {
  if (g_handlers) return;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &g_old_segv);
  sigaction(SIGBUS, &sa, &g_old_bus);
  g_handlers = true;
}

// where names the allocation (or stack) a faulting address belongs to.
static std::string where(uint64_t a) {
  char s[256];
  for (auto& kv : g_live) {
    const Alloc& x = kv.second;
    if (a >= (uint64_t)x.map && a < (uint64_t)x.map + x.map_len) {
      if (a >= x.base + x.size)
        snprintf(s, sizeof s, "%llu bytes past the end of a %llu-byte allocation at 0x%llx",
                 (unsigned long long)(a - x.base - x.size), (unsigned long long)x.size, (unsigned long long)x.base);
      else
        snprintf(s, sizeof s, "%llu bytes before a %llu-byte allocation at 0x%llx", (unsigned long long)(x.base - a),
                 (unsigned long long)x.size, (unsigned long long)x.base);
      return s;
    }
  }
  for (const Alloc& x : g_freed)
    if (a >= (uint64_t)x.map && a < (uint64_t)x.map + x.map_len) {
      snprintf(s, sizeof s, "in a freed %llu-byte allocation at 0x%llx", (unsigned long long)x.size,
               (unsigned long long)x.base);
      return s;
    }
  for (cudaemu_fiber* f : g_pool)
    if (a >= (uint64_t)f->map && a < (uint64_t)f->map + g_page) return "a thread's stack overflowed (local arrays too big?)";
  return "not device memory";
}

// run_grid runs every block in order; false with g_fail set on a fault.
static bool run_grid(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, bool reverse) {
  cudaemu_state* s = g_fn->mod->state;
  s->gridDim = dim3{gx, gy, gz};
  s->blockDim = dim3{bx, by, bz};
  g_blk.nt = (int)(bx * by * bz);
  g_blk.bx = bx;
  g_blk.by = by;
  g_blk.state.assign((size_t)g_blk.nt, NEW);
  g_blk.tid.resize((size_t)g_blk.nt);
  for (int t = 0; t < g_blk.nt; t++)
    g_blk.tid[(size_t)t] = uint3{(unsigned)t % bx, ((unsigned)t / bx) % by, (unsigned)t / (bx * by)};
  g_blk.fiber.assign((size_t)g_blk.nt, nullptr);
  int warps = (g_blk.nt + 31) / 32;
  g_blk.xbuf.assign((size_t)warps * 64, 0);
  g_blk.xgen.assign((size_t)warps, 0);
  g_fail.clear();
  sigjmp_buf jb;
  volatile unsigned z = 0, y = 0, x = 0;
  if (sigsetjmp(jb, 1) != 0) {
    char msg[512];
    snprintf(msg, sizeof msg, "invalid %s at 0x%llx by block (%u,%u,%u) thread %d: %s",
             t_fault_write ? "write" : "read", (unsigned long long)t_fault_addr, (unsigned)x, (unsigned)y, (unsigned)z, g_blk.cur,
             where(t_fault_addr).c_str());
    g_fail = msg;
    reset_fibers();
    return false;
  }
  for (z = 0; z < gz; z++)
    for (y = 0; y < gy; y++)
      for (x = 0; x < gx; x++) {
        s->blockIdx = uint3{(unsigned)x, (unsigned)y, (unsigned)z};
        for (auto& sh : g_fn->shared) memset(sh.first, 0xff, sh.second);  // unwritten shared memory reads as NaN
        t_fault_jmp = &jb;
        run_block(reverse);
        t_fault_jmp = nullptr;
        if (!g_fail.empty()) {
          char where_[64];
          snprintf(where_, sizeof where_, " (block (%u,%u,%u))", (unsigned)x, (unsigned)y, (unsigned)z);
          g_fail += where_;
          reset_fibers();
          return false;
        }
      }
  return true;
}

// CUDAEMU_PROFILE=1: launches and seconds per kernel, printed when the
// context is destroyed (a Go process exits without running atexit).
struct Prof {
  long launches = 0;
  double seconds = 0;
};
static std::map<std::string, Prof> g_prof;
static void print_prof() {
  if (g_prof.empty()) return;
  double total = 0;
  for (auto& kv : g_prof) total += kv.second.seconds;
  fprintf(stderr, "cudaemu profile: %.2f s in kernels\n", total);
  for (auto& kv : g_prof)
    fprintf(stderr, "  %-22s %8ld launches %9.3f s\n", kv.first.c_str(), kv.second.launches, kv.second.seconds);
  g_prof.clear();
}
static double now() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
struct ProfScope {
  Prof* p;
  double t0;
  explicit ProfScope(const std::string& name) : p(nullptr), t0(0) {
    static int on = -1;
    if (on < 0) {
      on = env_long("CUDAEMU_PROFILE", 0) != 0;
    }
    if (on) {
      p = &g_prof[name];
      t0 = now();
    }
  }
  ~ProfScope() {
    if (p) {
      p->launches++;
      p->seconds += now() - t0;
    }
  }
};

static void protect_tracked(int prot) {
  for (Tracked& t : g_tracked) mprotect(t.lo, t.pages * g_page, prot);
}

static void end_tracking() {
  g_tracking = false;
  protect_tracked(PROT_READ | PROT_WRITE);
  for (Tracked& t : g_tracked) {
    munmap(t.saved, t.pages * g_page);
    munmap(t.first, t.pages * g_page);
  }
  g_tracked.clear();
}

// race_between compares the forward run's writes (first, or saved where
// only the reverse run wrote) with the memory the reverse run left, then
// puts the forward run's back; "" when they agree.
static std::string race_between() {
  std::string at;
  for (Tracked& t : g_tracked)
    for (size_t pg = 0; pg < t.pages; pg++) {
      if (!t.dirty1[pg] && !t.dirty[pg]) continue;
      char* p = t.lo + pg * g_page;
      const char* want = (t.dirty1[pg] ? t.first : t.saved) + pg * g_page;
      if (at.empty() && memcmp(p, want, g_page) != 0)
        for (size_t o = 0; o < g_page; o++) {
          uint64_t addr = (uint64_t)p + o;
          if (p[o] == want[o] || addr < t.a->base || addr >= t.a->base + t.a->size) continue;
          if (g_atomic.count(addr & ~(uint64_t)3)) continue;
          char msg[256];
          snprintf(msg, sizeof msg,
                   "byte %llu of the %llu-byte allocation at 0x%llx differs (0x%02x forward, 0x%02x reverse)",
                   (unsigned long long)(addr - t.a->base), (unsigned long long)t.a->size,
                   (unsigned long long)t.a->base, (unsigned char)want[o], (unsigned char)p[o]);
          at = msg;
          break;
        }
      memcpy(p, want, g_page);
    }
  return at;
}

extern "C" CUresult cuLaunchKernel(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                   unsigned smem, void* stream, void** params, void** extra) {
  std::lock_guard<std::recursive_mutex> g(g_mu);
  if (CUresult r = ready()) return r;
  Function* f = (Function*)fn;
  bool known = false;
  for (Module* m : g_mods)
    for (auto& kv : m->fns)
      if (kv.second == f) known = true;
  if (!known) return CUDA_ERROR_INVALID_HANDLE;
  if (stream) return CUDA_ERROR_INVALID_HANDLE;
  if (extra) {
    note("cuLaunchKernel(%s): the extra argument is not emulated", f->name.c_str());
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  // The limits of every arch since sm_30.
  if (!gx || !gy || !gz || !bx || !by || !bz || bx > 1024 || by > 1024 || bz > 64 || (uint64_t)bx * by * bz > 1024 ||
      gx > 0x7fffffffu || gy > 65535 || gz > 65535) {
    note("cuLaunchKernel(%s): grid (%u,%u,%u) block (%u,%u,%u) is beyond the device's limits", f->name.c_str(), gx, gy,
         gz, bx, by, bz);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (f->shared_bytes + smem > kSharedPerBlock) {
    note("cuLaunchKernel(%s): %zu bytes of shared memory a block, over %u without opt-in", f->name.c_str(),
         f->shared_bytes + smem, kSharedPerBlock);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (f->nargs > 0 && !params) return CUDA_ERROR_INVALID_VALUE;
  std::vector<const Alloc*> bufs;
  uint64_t buf_bytes = 0;
  for (int i = 0; i < f->nargs; i++) {
    if (!f->ptrs[i]) continue;
    uint64_t p = 0;
    memcpy(&p, params[i], 8);
    if (p == 0) continue;
    const char* why;
    const Alloc* a = find(p, 0, &why);
    if (!a) {
      cudaemu_fail(CUDA_ERROR_ILLEGAL_ADDRESS, "memcheck: kernel %s argument %d (0x%llx) %s", f->name.c_str(), i,
                   (unsigned long long)p, why);
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    bool seen = false;
    for (const Alloc* b : bufs) seen = seen || b == a;
    if (!seen) {
      bufs.push_back(a);
      buf_bytes += a->size;
    }
  }
  install_handlers();
  ProfScope prof(f->name);
  g_fn = f;
  g_params = params;
  bool race = env_long("CUDAEMU_RACECHECK", 1) != 0 &&
              buf_bytes <= ((uint64_t)env_long("CUDAEMU_RACECHECK_MAX_MB", 1024) << 20);
  g_atomic.clear();
  f->mod->state->rt = race ? &kRace : &kPlain;
  if (race) {
    for (const Alloc* a : bufs) {
      Tracked t;
      t.a = a;
      t.lo = a->map + g_page;
      t.pages = (a->map_len - 2 * g_page) / g_page;
      t.saved = (char*)mmap(nullptr, t.pages * g_page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      t.first = (char*)mmap(nullptr, t.pages * g_page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      t.dirty.assign(t.pages, 0);
      g_tracked.push_back(t);
    }
    protect_tracked(PROT_READ);
    g_tracking = true;
  }
  if (!run_grid(gx, gy, gz, bx, by, bz, false)) {
    if (race) {  // leave memory as the faulting run left it, writable
      end_tracking();
    }
    bool fault = g_fail.rfind("invalid ", 0) == 0;
    cudaemu_fail(fault ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_ERROR_LAUNCH_FAILED, "%s: kernel %s: %s",
                 fault ? "memcheck" : "launch", f->name.c_str(), g_fail.c_str());
    return fault ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_ERROR_LAUNCH_FAILED;
  }
  if (!race) return CUDA_SUCCESS;
  // Second run, in the other order, from the same memory.
  for (Tracked& t : g_tracked)
    for (size_t pg = 0; pg < t.pages; pg++)
      if (t.dirty[pg]) {
        char* p = t.lo + pg * g_page;
        memcpy(t.first + pg * g_page, p, g_page);
        memcpy(p, t.saved + pg * g_page, g_page);
      }
  for (Tracked& t : g_tracked) {
    t.dirty1.swap(t.dirty);
    t.dirty.assign(t.pages, 0);
  }
  protect_tracked(PROT_READ);
  bool ok = run_grid(gx, gy, gz, bx, by, bz, true);
  g_tracking = false;
  protect_tracked(PROT_READ | PROT_WRITE);
  std::string race_at = race_between();
  end_tracking();
  if (!ok) {
    cudaemu_fail(CUDA_ERROR_LAUNCH_FAILED, "racecheck: kernel %s fails when its threads run in reverse order: %s",
                 f->name.c_str(), g_fail.c_str());
    return CUDA_ERROR_LAUNCH_FAILED;
  }
  if (!race_at.empty()) {
    cudaemu_fail(CUDA_ERROR_LAUNCH_FAILED,
                 "racecheck: kernel %s writes different memory when a block's threads run in reverse order: %s",
                 f->name.c_str(), race_at.c_str());
    return CUDA_ERROR_LAUNCH_FAILED;
  }
  return CUDA_SUCCESS;
}

extern "C" CUresult cuGetErrorName(CUresult r, const char** s) {
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  for (auto& e : kErrNames)
    if (e.code == r) {
      *s = e.name;
      return CUDA_SUCCESS;
    }
  *s = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

extern "C" CUresult cuGetErrorString(CUresult r, const char** s) { return cuGetErrorName(r, s); }
