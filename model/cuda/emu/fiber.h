// Cooperative fibers: the threads of one emulated block, switched only
// where the CUDA semantics need it (barriers, warp shuffles).
#pragma once
#include <stddef.h>

struct cudaemu_fiber {
  void* sp;        // saved stack pointer while switched out
  char* map;       // the stack's mapping (guard page first)
  size_t map_len;
  int thread;      // the block thread it runs now, -1 when parked
};

// Saves the running context's registers on its stack, stores its stack
// pointer in *save, and resumes the context whose stack pointer is next.
extern "C" void cudaemu_switch(void** save, void* next);

// Allocates a fiber whose first switch-in calls entry(f); entry never
// returns.
cudaemu_fiber* cudaemu_fiber_new(size_t stack, void (*entry)(cudaemu_fiber*));
// Makes f start afresh at entry (a fiber abandoned mid-kernel).
void cudaemu_fiber_reset(cudaemu_fiber* f, void (*entry)(cudaemu_fiber*));
