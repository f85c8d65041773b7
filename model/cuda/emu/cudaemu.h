// Internal interface between the emulator's libraries: libcublas and
// libnccl share the driver's allocation table and contexts.
#pragma once
#include <stddef.h>
#include <stdint.h>

extern "C" {
// The live allocation that holds [p, p+n) on the calling thread's current
// context, or 0 with *why set.
int cudaemu_check_range(uint64_t p, uint64_t n, const char** why);
// The same check against device dev's allocations, from any thread.
int cudaemu_check_range_dev(uint64_t p, uint64_t n, int dev, const char** why);
// The number of emulated devices (-1 before cuInit).
int cudaemu_device_count();
// Device dev's primary context: CUDA_SUCCESS when retained and healthy,
// else why not (its sticky fault, or not retained).
int cudaemu_device_state(int dev);
// Marks the current context failed (sticky, as a device fault is) with a
// report naming what failed.
void cudaemu_fail(int result, const char* fmt, ...);
// Whether the calling thread has a current, healthy context.
int cudaemu_current_ok();
// The last report (empty when none).
const char* cudaemuReport();
}

// ELF symbols of a module image, for the static shared memory of each
// kernel (function-local statics, named _ZZ<len><kernel>E...).
#include <string>
#include <vector>
struct cudaemu_static {
  std::string kernel;  // the function whose static it is
  uint64_t value, size;
};
// Reads the statics of an ELF64 image of n bytes; false if it is not one.
bool cudaemu_elf_statics(const unsigned char* img, size_t n, std::vector<cudaemu_static>* out, size_t* file_size);
