#include "fiber.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#if !defined(__x86_64__)
#error "cudaemu's fibers are written for x86-64"
#endif

// The callee-saved registers. MXCSR and the x87 control word are not
// switched: every fiber runs kernel code under the launching thread's
// floating-point environment, which no kernel changes (and their loads
// serialise the pipeline: a third of a switch's cost).
__asm__(
    ".text\n"
    ".globl cudaemu_switch\n"
    ".type cudaemu_switch,@function\n"
    "cudaemu_switch:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size cudaemu_switch,.-cudaemu_switch\n"
    // A new fiber's first return lands here with the fiber in r12 and the
    // entry in r13; the stack is aligned as at a call.
    ".globl cudaemu_fiber_start\n"
    ".type cudaemu_fiber_start,@function\n"
    "cudaemu_fiber_start:\n"
    "  subq $8, %rsp\n"
    "  movq %r12, %rdi\n"
    "  callq *%r13\n"
    "  ud2\n"
    ".size cudaemu_fiber_start,.-cudaemu_fiber_start\n");

extern "C" void cudaemu_fiber_start();

void cudaemu_fiber_reset(cudaemu_fiber* f, void (*entry)(cudaemu_fiber*)) {
  uintptr_t top = ((uintptr_t)f->map + f->map_len) & ~(uintptr_t)15;
  uint64_t* s = (uint64_t*)top;
  *--s = 0;                              // the start stub's fake return address
  *--s = (uint64_t)cudaemu_fiber_start;  // switch's ret
  *--s = 0;                              // rbp
  *--s = 0;                              // rbx
  *--s = (uint64_t)f;                    // r12
  *--s = (uint64_t)entry;                // r13
  *--s = 0;                              // r14
  *--s = 0;                              // r15
  f->sp = s;
  f->thread = -1;
}

cudaemu_fiber* cudaemu_fiber_new(size_t stack, void (*entry)(cudaemu_fiber*)) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  stack = (stack + page - 1) / page * page;
  cudaemu_fiber* f = (cudaemu_fiber*)calloc(1, sizeof *f);
  if (!f) return nullptr;
  f->map_len = stack + page;
  void* m = mmap(nullptr, f->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) {
    free(f);
    return nullptr;
  }
  mprotect(m, page, PROT_NONE);  // overflow faults instead of writing over a neighbour
  f->map = (char*)m;
  cudaemu_fiber_reset(f, entry);
  return f;
}
