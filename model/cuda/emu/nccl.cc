// libnccl.so.2 on the CPU: the collectives of the emulated devices of one
// process, with NCCL's semantics where swetui relies on them:
//   - a communicator per device from ncclCommInitAll; rank i on devlist[i];
//   - ncclAllReduce, ncclReduceScatter, ncclAllGather, ncclBroadcast and
//     ncclReduce, in place or not (in place as NCCL defines it: recv ==
//     send, or for reduce-scatter recv == send + rank*recvcount, for
//     all-gather send == recv + rank*sendcount);
//   - every rank must call each collective, in the same order with the same
//     count, type, operation and root; ncclGroupStart/End let one thread
//     issue the calls of several ranks.
// Where NCCL would hang or corrupt, the emulator reports instead: a rank
// that has not made the matching call within CUDAEMU_NCCL_TIMEOUT_S
// (default 300) aborts the communicators with a report naming it, and calls
// that do not match are refused on every rank. Buffers are checked against
// the driver's allocations of the communicator's device (memcheck), and a
// device whose context has faulted fails the call (ncclUnhandledCudaError).
//
// The emulated devices run work when it is launched, so a collective has
// completed on every rank when its call returns (NCCL's only enqueues it on
// the stream). Reductions run in rank order: every rank receives the same
// bits, as from NCCL, though NCCL's ring or tree order may round otherwise.
// bf16 partial sums are rounded to bf16 at each rank's addition, as NCCL's
// ring stores them; ncclAvg scales each input by 1/nranks before the sum
// for floating types (NCCL's pre-multiplied sum) and divides the sum for
// integers. Not emulated (refused with ncclInvalidArgument): fp16 and fp8,
// streams other than the default one, communicators across processes.
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cudaemu.h"

typedef int ncclResult_t;
enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};
enum {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9,
};
enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 };
enum Kind { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce };
static const char* kKindName[] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclBroadcast",
                                  "ncclReduce"};
static const char* kTypeName[] = {"ncclInt8",   "ncclUint8",   "ncclInt32",   "ncclUint32",  "ncclInt64",
                                  "ncclUint64", "ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16"};
static const char* kOpName[] = {"ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"};

static const int kVersion = 22105;  // the NCCL release whose API this follows: 2.21.5

static size_t type_size(int t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    default:
      return 8;
  }
}

struct Comm;

// Call is one rank's part of one collective.
struct Call {
  Kind kind;
  const void* send;
  void* recv;
  size_t count;  // NCCL's count argument: recvcount for reduce-scatter, sendcount for all-gather
  int type, op, root;
  Comm* comm;
};

// Slot is one collective of the clique, as its ranks arrive.
struct Slot {
  std::vector<Call> calls;
  std::vector<bool> arrived;
  int n = 0;
  bool done = false;
  ncclResult_t result = ncclSuccess;
};

// Clique is the communicators made together by one ncclCommInitAll.
struct Clique {
  int n;
  double timeout_s;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<uint64_t> next;    // per rank: the number of collectives it has called
  std::map<uint64_t, Slot> slots;  // not yet collected by every rank
  ncclResult_t aborted = ncclSuccess;
  std::string why;  // what aborted it
  int live;         // communicators not yet destroyed
  int waiting = 0;  // threads inside wait
  std::vector<Comm*> comms;
};

static const uint32_t kMagic = 0x6e63636c;
struct Comm {
  uint32_t magic;
  Clique* cl;
  int rank, dev;
  std::string last;  // this communicator's last error
};

static std::mutex g_last_mu;
static std::string g_last;  // the last error of a call without a valid communicator

static ncclResult_t fail(Comm* c, ncclResult_t r, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "cudaemu: nccl: %s\n", buf);
  if (c) {
    c->last = buf;
  } else {
    std::lock_guard<std::mutex> g(g_last_mu);
    g_last = buf;
  }
  return r;
}

static bool valid(Comm* c) { return c && c->magic == kMagic; }

static double env_seconds(const char* k, double def) {
  const char* v = getenv(k);
  if (!v || !*v) return def;
  char* end;
  double x = strtod(v, &end);
  return *end || x <= 0 ? def : x;
}

// ---- the arithmetic ----

static inline float bf16_to_f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even, NaN kept quiet, as the device's conversion does.
static inline uint16_t f_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

template <typename T>
static inline T combine(int op, T a, T b) {
  switch (op) {
    case ncclProd:
      return a * b;
    case ncclMax:
      return a > b ? a : b;  // NaN handling as fmax is not claimed
    case ncclMin:
      return a < b ? a : b;
    default:  // sum, avg
      return a + b;
  }
}

// reduce_into writes op over srcs[r][i] (rank order) into out[i].
template <typename T>
static void reduce_typed(int op, int n, const std::vector<const void*>& srcs, size_t count, void* out) {
  T* o = (T*)out;
  const bool avg_pre = op == ncclAvg && (T)0.5 != 0;  // floating types scale before the sum
  const T scale = (T)1 / (T)n;
  for (size_t i = 0; i < count; i++) {
    T acc = ((const T*)srcs[0])[i];
    if (avg_pre) acc = acc * scale;
    for (int r = 1; r < n; r++) {
      T x = ((const T*)srcs[r])[i];
      if (avg_pre) x = x * scale;
      acc = combine(op, acc, x);
    }
    if (op == ncclAvg && !avg_pre) acc = acc / (T)n;
    o[i] = acc;
  }
}

static void reduce_bf16(int op, int n, const std::vector<const void*>& srcs, size_t count, void* out) {
  uint16_t* o = (uint16_t*)out;
  const float scale = 1.f / (float)n;
  for (size_t i = 0; i < count; i++) {
    float acc = bf16_to_f(((const uint16_t*)srcs[0])[i]);
    if (op == ncclAvg) acc = bf16_to_f(f_to_bf16(acc * scale));
    for (int r = 1; r < n; r++) {
      float x = bf16_to_f(((const uint16_t*)srcs[r])[i]);
      if (op == ncclAvg) x = bf16_to_f(f_to_bf16(x * scale));
      acc = bf16_to_f(f_to_bf16(combine(op, acc, x)));
    }
    o[i] = f_to_bf16(acc);
  }
}

static void reduce_into(int type, int op, int n, const std::vector<const void*>& srcs, size_t count, void* out) {
  switch (type) {
    case ncclInt8:
      return reduce_typed<int8_t>(op, n, srcs, count, out);
    case ncclUint8:
      return reduce_typed<uint8_t>(op, n, srcs, count, out);
    case ncclInt32:
      return reduce_typed<int32_t>(op, n, srcs, count, out);
    case ncclUint32:
      return reduce_typed<uint32_t>(op, n, srcs, count, out);
    case ncclInt64:
      return reduce_typed<int64_t>(op, n, srcs, count, out);
    case ncclUint64:
      return reduce_typed<uint64_t>(op, n, srcs, count, out);
    case ncclFloat32:
      return reduce_typed<float>(op, n, srcs, count, out);
    case ncclFloat64:
      return reduce_typed<double>(op, n, srcs, count, out);
    case ncclBfloat16:
      return reduce_bf16(op, n, srcs, count, out);
  }
}

// run performs a slot whose ranks have all arrived and agree: every output
// is computed into a scratch buffer first, so in-place calls read their
// inputs before any rank's output is written.
static void run(Slot& s, int n) {
  const Call& c0 = s.calls[0];
  const size_t es = type_size(c0.type), cnt = c0.count;
  std::vector<const void*> srcs(n);
  switch (c0.kind) {
    case kAllReduce:
    case kReduce: {
      for (int r = 0; r < n; r++) srcs[r] = s.calls[r].send;
      std::vector<char> out(cnt * es);
      reduce_into(c0.type, c0.op, n, srcs, cnt, out.data());
      for (int r = 0; r < n; r++)
        if (c0.kind == kAllReduce || r == c0.root) memcpy(s.calls[r].recv, out.data(), out.size());
      break;
    }
    case kReduceScatter: {
      std::vector<std::vector<char>> out(n, std::vector<char>(cnt * es));
      for (int q = 0; q < n; q++) {
        for (int r = 0; r < n; r++) srcs[r] = (const char*)s.calls[r].send + q * cnt * es;
        reduce_into(c0.type, c0.op, n, srcs, cnt, out[q].data());
      }
      for (int q = 0; q < n; q++) memcpy(s.calls[q].recv, out[q].data(), cnt * es);
      break;
    }
    case kAllGather: {
      std::vector<char> out(n * cnt * es);
      for (int r = 0; r < n; r++) memcpy(out.data() + r * cnt * es, s.calls[r].send, cnt * es);
      for (int r = 0; r < n; r++) memcpy(s.calls[r].recv, out.data(), out.size());
      break;
    }
    case kBroadcast: {
      std::vector<char> out(cnt * es);
      memcpy(out.data(), s.calls[c0.root].send, out.size());
      for (int r = 0; r < n; r++) memcpy(s.calls[r].recv, out.data(), out.size());
      break;
    }
  }
}

static std::string describe(const Call& c) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s(count %zu, %s, %s, root %d)", kKindName[c.kind], c.count, kTypeName[c.type],
           c.kind == kAllGather || c.kind == kBroadcast ? "-" : kOpName[c.op], c.root);
  return buf;
}

// ---- checks at the call, before a rank posts ----

// check validates one rank's call on its own: the communicator, the
// arguments, the device and the extent of each buffer.
static ncclResult_t check(const Call& c) {
  Comm* m = c.comm;
  if (!valid(m)) return fail(nullptr, ncclInvalidArgument, "%s: not a communicator", kKindName[c.kind]);
  if (c.type < 0 || c.type > ncclBfloat16)
    return fail(m, ncclInvalidArgument, "%s: data type %d unknown", kKindName[c.kind], c.type);
  if (c.type == ncclFloat16)
    return fail(m, ncclInvalidArgument, "%s: ncclFloat16 is not emulated", kKindName[c.kind]);
  if (c.op < 0 || c.op > ncclAvg) return fail(m, ncclInvalidArgument, "%s: reduction %d unknown", kKindName[c.kind], c.op);
  const int n = m->cl->n;
  if ((c.kind == kBroadcast || c.kind == kReduce) && (c.root < 0 || c.root >= n))
    return fail(m, ncclInvalidArgument, "%s: root %d of %d ranks", kKindName[c.kind], c.root, n);
  {
    std::lock_guard<std::mutex> g(m->cl->mu);
    if (m->cl->aborted)
      return fail(m, m->cl->aborted, "%s on rank %d: the communicators were aborted: %s", kKindName[c.kind], m->rank,
                  m->cl->why.c_str());
  }
  if (int st = cudaemu_device_state(m->dev))
    return fail(m, ncclUnhandledCudaError, "%s on rank %d: device %d's context is not usable (CUresult %d)",
                kKindName[c.kind], m->rank, m->dev, st);
  const size_t es = type_size(c.type);
  size_t in = c.count * es, out = c.count * es;
  if (c.kind == kReduceScatter) in *= n;
  if (c.kind == kAllGather) out *= n;
  const bool reads = !(c.kind == kBroadcast && m->rank != c.root);
  const bool writes = !(c.kind == kReduce && m->rank != c.root);
  const char* why;
  if (c.count && reads && !cudaemu_check_range_dev((uint64_t)c.send, in, m->dev, &why))
    return fail(m, ncclInvalidArgument, "memcheck: %s on rank %d (device %d): sendbuff 0x%llx (%zu bytes) %s",
                kKindName[c.kind], m->rank, m->dev, (unsigned long long)c.send, in, why);
  if (c.count && writes && !cudaemu_check_range_dev((uint64_t)c.recv, out, m->dev, &why))
    return fail(m, ncclInvalidArgument, "memcheck: %s on rank %d (device %d): recvbuff 0x%llx (%zu bytes) %s",
                kKindName[c.kind], m->rank, m->dev, (unsigned long long)c.recv, out, why);
  // In place only as NCCL defines it; any other overlap is undefined there.
  if (c.count && reads && writes) {
    uint64_t s = (uint64_t)c.send, r = (uint64_t)c.recv;
    bool inplace = s == r;
    if (c.kind == kReduceScatter) inplace = r == s + (uint64_t)m->rank * out;
    if (c.kind == kAllGather) inplace = s == r + (uint64_t)m->rank * in;
    if (!inplace && s < r + out && r < s + in)
      return fail(m, ncclInvalidArgument, "%s on rank %d: send and receive buffers overlap without being in place",
                  kKindName[c.kind], m->rank);
  }
  return ncclSuccess;
}

// ---- posting and waiting ----

// post enters one rank's call into the next slot of its clique; the rank
// that completes a slot checks that the calls agree and runs it.
static uint64_t post(const Call& c) {
  Clique* cl = c.comm->cl;
  const int rank = c.comm->rank;
  std::lock_guard<std::mutex> g(cl->mu);
  uint64_t seq = cl->next[rank]++;
  Slot& s = cl->slots[seq];
  if (s.calls.empty()) {
    s.calls.resize(cl->n);
    s.arrived.assign(cl->n, false);
  }
  s.calls[rank] = c;
  s.arrived[rank] = true;
  if (++s.n == cl->n) {
    for (int r = 1; r < cl->n; r++) {
      const Call &a = s.calls[0], &b = s.calls[r];
      bool same = a.kind == b.kind && a.count == b.count && a.type == b.type;
      if (same && a.kind != kAllGather && a.kind != kBroadcast) same = a.op == b.op;
      if (same && (a.kind == kBroadcast || a.kind == kReduce)) same = a.root == b.root;
      if (!same) {
        char buf[768];
        snprintf(buf, sizeof buf, "collective #%llu: rank %d called %s where rank 0 called %s",
                 (unsigned long long)seq, r, describe(b).c_str(), describe(a).c_str());
        s.result = ncclInvalidUsage;
        cl->aborted = ncclInvalidUsage;
        cl->why = buf;
        break;
      }
    }
    if (s.result == ncclSuccess) run(s, cl->n);
    s.done = true;
    cl->cv.notify_all();
  }
  return seq;
}

// wait returns once slot seq has run, or reports the ranks that have not
// called it within the clique's timeout (and aborts the clique).
static ncclResult_t wait_locked(Comm* m, uint64_t seq, std::unique_lock<std::mutex>& g);
static ncclResult_t wait(Comm* m, uint64_t seq) {
  Clique* cl = m->cl;
  std::unique_lock<std::mutex> g(cl->mu);
  cl->waiting++;
  ncclResult_t r = wait_locked(m, seq, g);
  cl->waiting--;
  return r;
}

static ncclResult_t wait_locked(Comm* m, uint64_t seq, std::unique_lock<std::mutex>& g) {
  Clique* cl = m->cl;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(cl->timeout_s);
  for (;;) {
    auto it = cl->slots.find(seq);
    Slot& s = it->second;
    if (s.done) {
      ncclResult_t r = s.result;
      if (r) fail(m, r, "%s", cl->why.c_str());
      if (--s.n == 0) cl->slots.erase(it);
      return r;
    }
    if (cl->aborted) return fail(m, cl->aborted, "rank %d: the communicators were aborted: %s", m->rank, cl->why.c_str());
    if (cl->cv.wait_until(g, deadline) == std::cv_status::timeout && !s.done && !cl->aborted) {
      std::string missing;
      std::string what;
      for (int r = 0; r < cl->n; r++) {
        if (s.arrived[r]) {
          if (what.empty()) what = describe(s.calls[r]);
          continue;
        }
        if (!missing.empty()) missing += ", ";
        missing += std::to_string(r);
      }
      char buf[768];
      snprintf(buf, sizeof buf,
               "collective #%llu %s: rank(s) %s did not call it within %g s (NCCL would hang; "
               "CUDAEMU_NCCL_TIMEOUT_S sets the bound)",
               (unsigned long long)seq, what.c_str(), missing.c_str(), cl->timeout_s);
      cl->aborted = ncclSystemError;
      cl->why = buf;
      cl->cv.notify_all();
      return fail(m, ncclSystemError, "%s", buf);
    }
  }
}

// The group a thread has open: its calls post at ncclGroupEnd.
static thread_local int t_depth;
static thread_local std::vector<Call> t_group;

static ncclResult_t collective(const Call& c, void* stream) {
  if (stream)
    return fail(valid(c.comm) ? c.comm : nullptr, ncclInvalidArgument, "%s: only the default stream is emulated",
                kKindName[c.kind]);
  if (ncclResult_t r = check(c)) return r;
  if (t_depth > 0) {
    t_group.push_back(c);
    return ncclSuccess;
  }
  return wait(c.comm, post(c));
}

extern "C" ncclResult_t ncclGroupStart() {
  t_depth++;
  return ncclSuccess;
}

extern "C" ncclResult_t ncclGroupEnd() {
  if (t_depth == 0) return fail(nullptr, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--t_depth > 0) return ncclSuccess;
  std::vector<Call> calls;
  calls.swap(t_group);
  std::vector<uint64_t> seqs;
  for (const Call& c : calls) seqs.push_back(post(c));
  ncclResult_t first = ncclSuccess;
  for (size_t i = 0; i < calls.size(); i++)
    if (ncclResult_t r = wait(calls[i].comm, seqs[i]); r && !first) first = r;
  return first;
}

// ---- communicators ----

extern "C" ncclResult_t ncclGetVersion(int* v) {
  if (!v) return ncclInvalidArgument;
  *v = kVersion;
  return ncclSuccess;
}

extern "C" ncclResult_t ncclCommInitAll(Comm** comms, int ndev, const int* devlist) {
  if (!comms || ndev < 1) return fail(nullptr, ncclInvalidArgument, "ncclCommInitAll: %d devices", ndev);
  int have = cudaemu_device_count();
  if (have < 0) return fail(nullptr, ncclUnhandledCudaError, "ncclCommInitAll: cuInit has not run");
  std::vector<int> devs(ndev);
  for (int i = 0; i < ndev; i++) {
    devs[i] = devlist ? devlist[i] : i;
    if (devs[i] < 0 || devs[i] >= have)
      return fail(nullptr, ncclInvalidArgument, "ncclCommInitAll: device %d of %d", devs[i], have);
    for (int j = 0; j < i; j++)
      if (devs[j] == devs[i])
        return fail(nullptr, ncclInvalidUsage, "ncclCommInitAll: device %d listed twice", devs[i]);
  }
  Clique* cl = new Clique;
  cl->n = ndev;
  cl->timeout_s = env_seconds("CUDAEMU_NCCL_TIMEOUT_S", 300);
  cl->next.assign(ndev, 0);
  cl->live = ndev;
  for (int i = 0; i < ndev; i++) comms[i] = new Comm{kMagic, cl, i, devs[i], ""};
  cl->comms.assign(comms, comms + ndev);
  return ncclSuccess;
}

// release ends a communicator. Its memory goes with the clique's last one,
// and only when no thread waits in a collective: here, unlike on a GPU, a
// rank blocked on an aborted collective is inside NCCL's call, and wakes
// to read its communicator (such a clique is left allocated).
static ncclResult_t release(Comm* c, bool abort) {
  if (!valid(c)) return fail(nullptr, ncclInvalidArgument, "%s: not a communicator", abort ? "ncclCommAbort" : "ncclCommDestroy");
  Clique* cl = c->cl;
  std::unique_lock<std::mutex> g(cl->mu);
  c->magic = 0;
  if (abort && !cl->aborted) {
    cl->aborted = ncclRemoteError;
    cl->why = "ncclCommAbort was called on rank " + std::to_string(c->rank);
    cl->cv.notify_all();
  }
  if (--cl->live > 0 || cl->waiting > 0) return ncclSuccess;
  g.unlock();
  for (Comm* m : cl->comms) delete m;
  delete cl;
  return ncclSuccess;
}

extern "C" ncclResult_t ncclCommDestroy(Comm* c) { return release(c, false); }
extern "C" ncclResult_t ncclCommAbort(Comm* c) { return release(c, true); }

extern "C" ncclResult_t ncclCommCount(const Comm* c, int* n) {
  if (!valid((Comm*)c) || !n) return ncclInvalidArgument;
  *n = c->cl->n;
  return ncclSuccess;
}

extern "C" ncclResult_t ncclCommCuDevice(const Comm* c, int* dev) {
  if (!valid((Comm*)c) || !dev) return ncclInvalidArgument;
  *dev = c->dev;
  return ncclSuccess;
}

extern "C" ncclResult_t ncclCommUserRank(const Comm* c, int* rank) {
  if (!valid((Comm*)c) || !rank) return ncclInvalidArgument;
  *rank = c->rank;
  return ncclSuccess;
}

extern "C" ncclResult_t ncclCommGetAsyncError(Comm* c, ncclResult_t* err) {
  if (!valid(c) || !err) return ncclInvalidArgument;
  std::lock_guard<std::mutex> g(c->cl->mu);
  *err = c->cl->aborted;
  return ncclSuccess;
}

extern "C" const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
  }
  return "unknown result code";
}

// ncclGetLastError: the communicator's last report, or the last one made
// without a communicator.
extern "C" const char* ncclGetLastError(Comm* c) {
  if (valid(c)) return c->last.c_str();
  static thread_local std::string out;
  std::lock_guard<std::mutex> g(g_last_mu);
  out = g_last;
  return out.c_str();
}

// ---- the collectives ----

extern "C" ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, int type, int op, Comm* comm,
                                      void* stream) {
  return collective(Call{kAllReduce, send, recv, count, type, op, 0, comm}, stream);
}

extern "C" ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvcount, int type, int op, Comm* comm,
                                          void* stream) {
  return collective(Call{kReduceScatter, send, recv, recvcount, type, op, 0, comm}, stream);
}

extern "C" ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendcount, int type, Comm* comm,
                                      void* stream) {
  return collective(Call{kAllGather, send, recv, sendcount, type, ncclSum, 0, comm}, stream);
}

extern "C" ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, int type, int root, Comm* comm,
                                      void* stream) {
  return collective(Call{kBroadcast, send, recv, count, type, ncclSum, root, comm}, stream);
}

extern "C" ncclResult_t ncclReduce(const void* send, void* recv, size_t count, int type, int op, int root, Comm* comm,
                                   void* stream) {
  return collective(Call{kReduce, send, recv, count, type, op, root, comm}, stream);
}
