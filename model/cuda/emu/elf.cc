// The ELF facts the emulator needs from a module image: its size (a cubin
// is handed to cuModuleLoadData without one, as here) and the
// function-local statics that hold each kernel's shared memory.
#include <elf.h>
#include <string.h>

#include "cudaemu.h"

// A local static's mangled name is _ZZ<len><function>E<len><var>...;
// for extern "C" kernels <function> is the kernel's own name.
static bool static_owner(const char* name, std::string* fn) {
  if (strncmp(name, "_ZZ", 3) != 0) return false;
  const char* p = name + 3;
  size_t len = 0;
  if (*p < '0' || *p > '9') return false;
  while (*p >= '0' && *p <= '9') len = len * 10 + (size_t)(*p++ - '0');
  if (strnlen(p, len + 1) < len || p[len] != 'E') return false;
  fn->assign(p, len);
  return true;
}

bool cudaemu_elf_statics(const unsigned char* img, size_t n, std::vector<cudaemu_static>* out, size_t* file_size) {
  if (n < sizeof(Elf64_Ehdr) || memcmp(img, ELFMAG, SELFMAG) != 0 || img[EI_CLASS] != ELFCLASS64) return false;
  Elf64_Ehdr eh;
  memcpy(&eh, img, sizeof eh);
  if (eh.e_type != ET_DYN || eh.e_shentsize != sizeof(Elf64_Shdr)) return false;
#if defined(__x86_64__)
  if (eh.e_machine != EM_X86_64) return false;
#elif defined(__aarch64__)
  if (eh.e_machine != EM_AARCH64) return false;
#endif
  uint64_t end = eh.e_shoff + (uint64_t)eh.e_shnum * eh.e_shentsize;
  if (eh.e_shoff == 0 || end > n) return false;
  if (file_size) *file_size = end;
  if (!out) return true;
  const Elf64_Shdr* sh = (const Elf64_Shdr*)(img + eh.e_shoff);
  for (int i = 0; i < eh.e_shnum; i++) {
    if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh.e_shnum) continue;
    const Elf64_Shdr& strs = sh[sh[i].sh_link];
    if (sh[i].sh_offset + sh[i].sh_size > n || strs.sh_offset + strs.sh_size > n) return false;
    const Elf64_Sym* sym = (const Elf64_Sym*)(img + sh[i].sh_offset);
    size_t count = sh[i].sh_size / sizeof(Elf64_Sym);
    const char* names = (const char*)(img + strs.sh_offset);
    for (size_t j = 0; j < count; j++) {
      if (ELF64_ST_TYPE(sym[j].st_info) != STT_OBJECT || sym[j].st_name >= strs.sh_size) continue;
      std::string fn;
      if (out && static_owner(names + sym[j].st_name, &fn)) out->push_back({fn, sym[j].st_value, sym[j].st_size});
    }
  }
  return true;
}
