// libnvrtc.so.12 on the CPU: a program's CUDA C is compiled by the host's
// C++ compiler (CUDAEMU_CXX, default c++) after cudaemu_device.h, into an
// x86-64 shared object that the emulated driver loads as a module image.
// The options NVRTC takes are checked as NVRTC checks them; a compile
// error comes back through nvrtcGetProgramLog. A kernel whose static
// shared memory exceeds 48 KiB is refused, as ptxas refuses it.
#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cudaemu.h"

extern char** environ;

typedef int nvrtcResult;
enum {
  NVRTC_SUCCESS = 0,
  NVRTC_ERROR_OUT_OF_MEMORY = 1,
  NVRTC_ERROR_PROGRAM_CREATION_FAILURE = 2,
  NVRTC_ERROR_INVALID_INPUT = 3,
  NVRTC_ERROR_INVALID_PROGRAM = 4,
  NVRTC_ERROR_INVALID_OPTION = 5,
  NVRTC_ERROR_COMPILATION = 6,
  NVRTC_ERROR_BUILTIN_OPERATION_FAILURE = 7,
  NVRTC_ERROR_INTERNAL_ERROR = 11,
};

// The emulation header, built into this library (Makefile: -DCUDAEMU_HEADER).
__asm__(
    ".section .rodata\n"
    ".globl cudaemu_header_text\n"
    "cudaemu_header_text:\n"
    ".incbin \"" CUDAEMU_HEADER "\"\n"
    ".byte 0\n"
    ".previous\n");
extern "C" const char cudaemu_header_text[];

struct Program {
  std::string src, name;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string log;
  std::string image;
  bool compiled = false;
};

static const char* kNames[] = {"NVRTC_SUCCESS",
                               "NVRTC_ERROR_OUT_OF_MEMORY",
                               "NVRTC_ERROR_PROGRAM_CREATION_FAILURE",
                               "NVRTC_ERROR_INVALID_INPUT",
                               "NVRTC_ERROR_INVALID_PROGRAM",
                               "NVRTC_ERROR_INVALID_OPTION",
                               "NVRTC_ERROR_COMPILATION",
                               "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE",
                               "NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION",
                               "NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
                               "NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID",
                               "NVRTC_ERROR_INTERNAL_ERROR"};

extern "C" const char* nvrtcGetErrorString(nvrtcResult r) {
  if (r >= 0 && r < (int)(sizeof kNames / sizeof kNames[0])) return kNames[r];
  return "NVRTC_ERROR unknown";
}

extern "C" nvrtcResult nvrtcVersion(int* major, int* minor) {
  if (!major || !minor) return NVRTC_ERROR_INVALID_INPUT;
  *major = 12;
  *minor = 8;
  return NVRTC_SUCCESS;
}

extern "C" nvrtcResult nvrtcCreateProgram(Program** prog, const char* src, const char* name, int n, const char* const* headers,
                                          const char* const* names) {
  if (!prog || !src || n < 0 || (n > 0 && (!headers || !names))) return NVRTC_ERROR_INVALID_INPUT;
  Program* p = new Program;
  p->src = src;
  p->name = name && *name ? name : "default_program";
  for (int i = 0; i < n; i++) {
    if (!headers[i] || !names[i]) {
      delete p;
      return NVRTC_ERROR_INVALID_INPUT;
    }
    p->headers.push_back({names[i], headers[i]});
  }
  *prog = p;
  return NVRTC_SUCCESS;
}

extern "C" nvrtcResult nvrtcDestroyProgram(Program** prog) {
  if (!prog || !*prog) return NVRTC_ERROR_INVALID_PROGRAM;
  delete *prog;
  *prog = nullptr;
  return NVRTC_SUCCESS;
}

static bool write_file(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  f << data;
  return (bool)f;
}

static std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// run executes argv with stdout and stderr into log; the exit status.
static int run(const std::vector<std::string>& argv, const std::string& log) {
  std::vector<char*> a;
  for (auto& s : argv) a.push_back((char*)s.c_str());
  a.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid;
  int rc = posix_spawnp(&pid, a[0], &fa, nullptr, a.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int st = 0;
  while (waitpid(pid, &st, 0) < 0) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void remove_tree(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") unlink((dir + "/" + n).c_str());
    }
    closedir(d);
  }
  rmdir(dir.c_str());
}

// kernels lists the extern "C" __global__ functions of preprocessed source
// (the header spells __global__ as the marker below).
static std::vector<std::string> kernels(const std::string& pp) {
  std::vector<std::string> out;
  const std::string mark = "__attribute__((cudaemu_global))";
  for (size_t at = pp.find(mark); at != std::string::npos; at = pp.find(mark, at + 1)) {
    size_t v = pp.find("void", at + mark.size());
    if (v == std::string::npos) break;
    size_t i = v + 4;
    while (i < pp.size() && isspace((unsigned char)pp[i])) i++;
    size_t j = i;
    while (j < pp.size() && (isalnum((unsigned char)pp[j]) || pp[j] == '_')) j++;
    size_t k = j;
    while (k < pp.size() && isspace((unsigned char)pp[k])) k++;
    // A declaration and its definition name the kernel twice.
    if (j > i && k < pp.size() && pp[k] == '(') {
      std::string n = pp.substr(i, j - i);
      bool seen = false;
      for (auto& x : out) seen = seen || x == n;
      if (!seen) out.push_back(n);
    }
  }
  return out;
}

extern "C" nvrtcResult nvrtcCompileProgram(Program* p, int n, const char* const* opts) {
  if (!p) return NVRTC_ERROR_INVALID_PROGRAM;
  if (n < 0 || (n > 0 && !opts)) return NVRTC_ERROR_INVALID_INPUT;
  p->log.clear();
  p->compiled = false;
  std::vector<std::string> defs;
  std::string stdv = "-std=c++17", opt = "-O2";
  int arch = 52;
  for (int i = 0; i < n; i++) {
    if (!opts[i]) return NVRTC_ERROR_INVALID_INPUT;
    std::string o = opts[i];
    auto val = [&](const char* pre) -> const char* {
      size_t l = strlen(pre);
      return o.compare(0, l, pre) == 0 ? o.c_str() + l : nullptr;
    };
    const char* v;
    if ((v = val("--gpu-architecture=")) || (v = val("-arch=")) || (v = val("--gpu-architecture ")) || (v = val("-arch "))) {
      int a = 0;
      if ((sscanf(v, "sm_%d", &a) != 1 && sscanf(v, "compute_%d", &a) != 1) || a < 50 || a > 121) {
        p->log = "nvrtc: error: invalid value for --gpu-architecture (-arch)\n";
        return NVRTC_ERROR_INVALID_OPTION;
      }
      arch = a;
    } else if ((v = val("--std=")) || (v = val("-std="))) {
      std::string s = v;
      if (s != "c++03" && s != "c++11" && s != "c++14" && s != "c++17" && s != "c++20") {
        p->log = "nvrtc: error: invalid value for --std\n";
        return NVRTC_ERROR_INVALID_OPTION;
      }
      stdv = "-std=" + (s == "c++03" ? std::string("c++11") : s);  // the header needs C++11
    } else if ((v = val("-D")) || (v = val("--define-macro="))) {
      defs.push_back(std::string("-D") + v);
    } else if ((v = val("-U")) || (v = val("--undefine-macro="))) {
      defs.push_back(std::string("-U") + v);
    } else if ((v = val("-I")) || (v = val("--include-path="))) {
      defs.push_back(std::string("-I") + v);
    } else if (o == "-G" || o == "--device-debug") {
      opt = "-O0";
    } else if (o == "--use_fast_math" || o == "-use_fast_math" || o == "-lineinfo" || o == "--generate-line-info" ||
               o == "-default-device" || o == "--device-as-default-execution-space" || val("--fmad=") || val("-fmad=") ||
               val("-ftz=") || val("--ftz=") || val("-prec-div=") || val("--prec-div=") || val("-prec-sqrt=") ||
               val("--prec-sqrt=") || val("-maxrregcount=") || val("--maxrregcount=") || o == "-rdc=false" ||
               o == "--relocatable-device-code=false") {
      // accepted; nothing in the emulation depends on it
    } else {
      p->log = "nvrtc: error: unrecognized option " + o + "\n";
      return NVRTC_ERROR_INVALID_OPTION;
    }
  }
  const char* tmp = getenv("TMPDIR");
  std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/cudaemu-nvrtc-XXXXXX";
  std::vector<char> d(dir.begin(), dir.end());
  d.push_back(0);
  if (!mkdtemp(d.data())) return NVRTC_ERROR_INTERNAL_ERROR;
  dir = d.data();
  std::string name = p->name;
  for (char& c : name)
    if (c == '/') c = '_';
  std::string src = dir + "/" + name, hdr = dir + "/cudaemu_device.h", pp = dir + "/program.ii",
              so = dir + "/program.so", log = dir + "/log";
  bool ok = write_file(src, p->src) && write_file(hdr, cudaemu_header_text);
  for (auto& h : p->headers) ok = ok && write_file(dir + "/" + h.first, h.second);
  if (!ok) {
    remove_tree(dir);
    return NVRTC_ERROR_INTERNAL_ERROR;
  }
  const char* cxx = getenv("CUDAEMU_CXX");
  std::string cc = cxx && *cxx ? cxx : "c++";
  std::vector<std::string> pre = {cc, "-E", "-x", "c++", stdv, "-D__CUDACC__", "-D__CUDACC_RTC__", "-D__NVCC__",
                                  "-D__CUDA_ARCH__=" + std::to_string(arch * 10), "-D__global__=__attribute__((cudaemu_global))",
                                  "-include", hdr, "-I", dir};
  pre.insert(pre.end(), defs.begin(), defs.end());
  pre.push_back(src);
  pre.push_back("-o");
  pre.push_back(pp);
  int rc = run(pre, log);
  nvrtcResult res = NVRTC_SUCCESS;
  if (rc == 0) {
    std::string text = read_file(pp);
    std::string tail = "\nextern \"C\" { cudaemu_state __cudaemu; }\n";
    for (auto& k : kernels(text)) {
      tail += "extern \"C\" void cudaemu_run_" + k + "(void** p) { cudaemu::launch(" + k + ", p); }\n";
      tail += "extern \"C\" int cudaemu_args_" + k + "(int* s, int* q, int c) { return cudaemu::describe(" + k +
              ", s, q, c); }\n";
    }
    write_file(pp, text + tail);
    std::vector<std::string> cmd = {cc, "-x", "c++-cpp-output", stdv, opt, "-fPIC", "-shared", "-Wno-attributes",
                                    "-fno-exceptions", "-fno-math-errno", "-o", so, pp};
    rc = run(cmd, log);
  }
  p->log = read_file(log);
  if (rc != 0) {
    res = NVRTC_ERROR_COMPILATION;
  } else {
    p->image = read_file(so);
    std::vector<cudaemu_static> st;
    if (!cudaemu_elf_statics((const unsigned char*)p->image.data(), p->image.size(), &st, nullptr)) {
      p->log += "cudaemu: the compiler's output is not an ELF shared object\n";
      res = NVRTC_ERROR_INTERNAL_ERROR;
    }
    std::map<std::string, uint64_t> per;
    for (auto& s : st) per[s.kernel] += s.size;
    for (auto& kv : per)
      if (kv.second > 48 * 1024) {
        char m[256];
        snprintf(m, sizeof m, "ptxas error   : Entry function '%s' uses too much shared data (0x%llx bytes, 0xc000 max)\n",
                 kv.first.c_str(), (unsigned long long)kv.second);
        p->log += m;
        res = NVRTC_ERROR_COMPILATION;
      }
    p->compiled = res == NVRTC_SUCCESS;
  }
  remove_tree(dir);
  return res;
}

extern "C" nvrtcResult nvrtcGetProgramLogSize(Program* p, size_t* n) {
  if (!p) return NVRTC_ERROR_INVALID_PROGRAM;
  if (!n) return NVRTC_ERROR_INVALID_INPUT;
  *n = p->log.size() + 1;
  return NVRTC_SUCCESS;
}

extern "C" nvrtcResult nvrtcGetProgramLog(Program* p, char* out) {
  if (!p) return NVRTC_ERROR_INVALID_PROGRAM;
  if (!out) return NVRTC_ERROR_INVALID_INPUT;
  memcpy(out, p->log.c_str(), p->log.size() + 1);
  return NVRTC_SUCCESS;
}

// The image is the same for CUBIN and PTX: a CPU module has no virtual ISA.
extern "C" nvrtcResult nvrtcGetCUBINSize(Program* p, size_t* n) {
  if (!p || !p->compiled) return NVRTC_ERROR_INVALID_PROGRAM;
  if (!n) return NVRTC_ERROR_INVALID_INPUT;
  *n = p->image.size();
  return NVRTC_SUCCESS;
}

extern "C" nvrtcResult nvrtcGetCUBIN(Program* p, char* out) {
  if (!p || !p->compiled) return NVRTC_ERROR_INVALID_PROGRAM;
  if (!out) return NVRTC_ERROR_INVALID_INPUT;
  memcpy(out, p->image.data(), p->image.size());
  return NVRTC_SUCCESS;
}

extern "C" nvrtcResult nvrtcGetPTXSize(Program* p, size_t* n) { return nvrtcGetCUBINSize(p, n); }
extern "C" nvrtcResult nvrtcGetPTX(Program* p, char* out) { return nvrtcGetCUBIN(p, out); }
