package cuda

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestNCCLOnEmulatedDevices runs TestNCCLCollectives and
// TestDataParallelMatchesOneDevice in a child process on 2 and on 3
// emulated devices (the device count is read once, at cuInit).
func TestNCCLOnEmulatedDevices(t *testing.T) {
	libs := emulatorLibs(t)
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d devices", n), func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^(TestNCCLCollectives|TestDataParallelMatchesOneDevice)$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), "SWETUI_TEST_NCCL="+strconv.Itoa(n), "CUDAEMU_DEVICES="+strconv.Itoa(n),
				"SWETUI_GPU=0", "SWETUI_CUDA_LIBS="+libs, "CUDAEMU_NCCL_TIMEOUT_S=2", "XDG_CACHE_HOME="+t.TempDir(),
				"CUDAEMU_RACECHECK=0") // the kernels' races are TestGPUKernelsMatchCPU's
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "--- PASS: TestNCCLCollectives") || !strings.Contains(string(out), "--- PASS: TestDataParallelMatchesOneDevice") {
				t.Fatalf("%v:\n%s", err, tail(string(out), 6000))
			}
			for _, line := range strings.Split(string(out), "\n") {
				if strings.Contains(line, "vs one device") || strings.Contains(line, "NCCL ") {
					t.Log(strings.TrimSpace(line))
				}
			}
		})
	}
}

// ncclRanks opens n devices and their communicators: the emulator's when
// SWETUI_TEST_NCCL names the count, else every GPU with SWETUI_GPU=1.
func ncclRanks(t *testing.T) ([]*CUDADevice, *Loader) {
	t.Helper()
	n, _ := strconv.Atoi(os.Getenv("SWETUI_TEST_NCCL"))
	if n < 2 {
		t.Skip("run by TestNCCLOnEmulatedDevices (SWETUI_TEST_NCCL=n with CUDAEMU_DEVICES=n)")
	}
	l := &Loader{ConfigDirs: filepath.SplitList(os.Getenv("SWETUI_CUDA_LIBS"))}
	devs := make([]*CUDADevice, n)
	for i := range devs {
		d, err := OpenCUDA(context.Background(), i, l)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		devs[i] = d
	}
	return devs, l
}

// onRanks runs fn for every rank at once, each inside its device's Do on a
// goroutine of its own, and returns each rank's error.
func onRanks(devs []*CUDADevice, fn func(rank int, d *CUDADevice) error) []error {
	errs := make([]error, len(devs))
	var wg sync.WaitGroup
	for r, d := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = d.Do(func() error { return fn(r, d) })
		}()
	}
	wg.Wait()
	return errs
}

func noErrors(t *testing.T, what string, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("%s: rank %d: %v", what, r, err)
		}
	}
}

// TestNCCLCollectives: each collective swetui uses gives NCCL's result on
// every rank, in place and not, f32 and bf16, from a goroutine per rank
// and from one thread in a group; a rank that does not call, calls that do
// not agree and a buffer past its allocation are reported, not hung on.
func TestNCCLCollectives(t *testing.T) {
	devs, l := ncclRanks(t)
	n := len(devs)
	comms, err := OpenComms(devs, l)
	if err != nil {
		t.Fatal(err)
	}
	defer comms.Close()
	t.Logf("NCCL %s (%s), %d ranks", comms.Version(), comms.Path(), comms.Size())
	const N = 1031 // not a multiple of anything the emulator might favour
	rng := rand.New(rand.NewSource(1))
	data := make([][]float32, n) // rank r's input, N*n values
	for r := range data {
		data[r] = make([]float32, N*n)
		for i := range data[r] {
			data[r][i] = float32(rng.NormFloat64())
		}
	}
	sum := func(from, count int) []float32 {
		out := make([]float32, count)
		for i := range out {
			var s float64
			for r := 0; r < n; r++ {
				s += float64(data[r][from+i])
			}
			out[i] = float32(s)
		}
		return out
	}
	near := func(t *testing.T, what string, got, want []float32) {
		t.Helper()
		for i := range want {
			if d := math.Abs(float64(got[i] - want[i])); d > 1e-5*(1+math.Abs(float64(want[i]))) {
				t.Fatalf("%s: [%d] = %g, want %g", what, i, got[i], want[i])
			}
		}
	}
	upload := func(d *CUDADevice, dt DType, v []float32) (Tensor, error) {
		x, err := d.Alloc(dt, len(v))
		if err != nil {
			return x, err
		}
		return x, d.Upload(x, v)
	}
	down := func(d *CUDADevice, x Tensor) ([]float32, error) {
		out := make([]float32, x.N)
		return out, d.Download(out, x)
	}

	t.Run("all-reduce in place", func(t *testing.T) {
		got := make([][]float32, n)
		noErrors(t, "all-reduce", onRanks(devs, func(r int, d *CUDADevice) error {
			x, err := upload(d, F32, data[r][:N])
			if err != nil {
				return err
			}
			defer d.Free(x)
			if err := comms.AllReduceSum(r, x); err != nil {
				return err
			}
			got[r], err = down(d, x)
			return err
		}))
		for r := range got {
			near(t, fmt.Sprintf("rank %d", r), got[r], sum(0, N))
			if r > 0 && fmt.Sprint(got[r]) != fmt.Sprint(got[0]) {
				t.Errorf("rank %d's sum differs from rank 0's: NCCL gives every rank the same bits", r)
			}
		}
	})

	t.Run("all-reduce bf16", func(t *testing.T) {
		// Multiples of 1/8 under 16: every partial sum is exact in bf16.
		in := make([][]float32, n)
		want := make([]float32, N)
		for r := range in {
			in[r] = make([]float32, N)
			for i := range in[r] {
				in[r][i] = float32(rng.Intn(64)-32) / 8
				want[i] += in[r][i]
			}
		}
		noErrors(t, "all-reduce bf16", onRanks(devs, func(r int, d *CUDADevice) error {
			x, err := upload(d, BF16, in[r])
			if err != nil {
				return err
			}
			defer d.Free(x)
			if err := comms.AllReduceSum(r, x); err != nil {
				return err
			}
			got, err := down(d, x)
			if err == nil && fmt.Sprint(got) != fmt.Sprint(want) {
				err = fmt.Errorf("bf16 sum differs from the exact one")
			}
			return err
		}))
	})

	for _, inPlace := range []bool{false, true} {
		t.Run(fmt.Sprintf("reduce-scatter and all-gather, in place %v", inPlace), func(t *testing.T) {
			scattered := make([][]float32, n)
			gathered := make([][]float32, n)
			noErrors(t, "reduce-scatter", onRanks(devs, func(r int, d *CUDADevice) error {
				src, err := upload(d, F32, data[r])
				if err != nil {
					return err
				}
				defer d.Free(src)
				dst := src.View(r*N, N)
				if !inPlace {
					if dst, err = d.Alloc(F32, N); err != nil {
						return err
					}
					defer d.Free(dst)
				}
				if err := comms.ReduceScatterSum(r, dst, src); err != nil {
					return err
				}
				if scattered[r], err = down(d, dst); err != nil {
					return err
				}
				// ZeRO-1's second half: each rank's part gathered back.
				all := src
				if !inPlace {
					if all, err = d.Alloc(F32, N*n); err != nil {
						return err
					}
					defer d.Free(all)
				}
				if err := comms.AllGather(r, all, dst); err != nil {
					return err
				}
				gathered[r], err = down(d, all)
				return err
			}))
			for r := range scattered {
				near(t, fmt.Sprintf("rank %d's part", r), scattered[r], sum(r*N, N))
				near(t, fmt.Sprintf("rank %d's gather", r), gathered[r], sum(0, N*n))
			}
		})
	}

	t.Run("broadcast from the last rank", func(t *testing.T) {
		noErrors(t, "broadcast", onRanks(devs, func(r int, d *CUDADevice) error {
			x, err := upload(d, F32, data[r][:N])
			if err != nil {
				return err
			}
			defer d.Free(x)
			if err := comms.Broadcast(r, x, n-1); err != nil {
				return err
			}
			got, err := down(d, x)
			if err == nil && fmt.Sprint(got) != fmt.Sprint(data[n-1][:N]) {
				err = fmt.Errorf("rank %d holds other values than the root's", r)
			}
			return err
		}))
	})

	t.Run("one thread drives every rank in a group", func(t *testing.T) {
		xs := make([]Tensor, n)
		noErrors(t, "upload", onRanks(devs, func(r int, d *CUDADevice) error {
			var err error
			xs[r], err = upload(d, F32, data[r][:N])
			return err
		}))
		runtime.LockOSThread()
		err := comms.Group(func() error {
			for r := range xs {
				if err := comms.AllReduceSum(r, xs[r]); err != nil {
					return err
				}
			}
			return nil
		})
		runtime.UnlockOSThread()
		if err != nil {
			t.Fatal(err)
		}
		noErrors(t, "download", onRanks(devs, func(r int, d *CUDADevice) error {
			defer d.Free(xs[r])
			got, err := down(d, xs[r])
			if err == nil {
				near(t, fmt.Sprintf("rank %d", r), got, sum(0, N))
			}
			return err
		}))
	})

	// The failures: each on communicators of its own, which it aborts.
	fresh := func(t *testing.T) *Comms {
		c, err := OpenComms(devs, l)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	t.Run("a rank that does not call", func(t *testing.T) {
		c := fresh(t)
		start := time.Now()
		errs := onRanks(devs, func(r int, d *CUDADevice) error {
			if r == n-1 {
				return nil
			}
			x, err := d.Alloc(F32, N)
			if err != nil {
				return err
			}
			defer d.Free(x)
			return c.AllReduceSum(r, x)
		})
		for r := 0; r < n-1; r++ {
			if errs[r] == nil || !strings.Contains(errs[r].Error(), fmt.Sprintf("rank(s) %d did not call it", n-1)) {
				t.Errorf("rank %d: %v", r, errs[r])
			}
		}
		if el := time.Since(start); el > 30*time.Second {
			t.Errorf("the missing rank was reported after %s, with a 2 s bound", el)
		}
		t.Logf("rank 0: %v", errs[0])
		// The communicators are aborted: every later call fails at once.
		err := devs[0].Do(func() error {
			x, err := devs[0].Alloc(F32, 4)
			if err != nil {
				return err
			}
			defer devs[0].Free(x)
			return c.AllReduceSum(0, x)
		})
		if err == nil || !strings.Contains(err.Error(), "aborted") {
			t.Errorf("a call after the abort: %v", err)
		}
	})

	t.Run("calls that do not agree", func(t *testing.T) {
		c := fresh(t)
		errs := onRanks(devs, func(r int, d *CUDADevice) error {
			x, err := d.Alloc(F32, N+r)
			if err != nil {
				return err
			}
			defer d.Free(x)
			return c.AllReduceSum(r, x)
		})
		for r, err := range errs {
			if err == nil || !strings.Contains(err.Error(), "invalid usage") || !strings.Contains(err.Error(), fmt.Sprintf("count %d", N+1)) {
				t.Errorf("rank %d: %v", r, err)
			}
		}
	})

	t.Run("a buffer past its allocation, then abort", func(t *testing.T) {
		c := fresh(t)
		errs := onRanks(devs, func(r int, d *CUDADevice) error {
			x, err := d.Alloc(F32, N)
			if err != nil {
				return err
			}
			defer d.Free(x)
			if r == 0 {
				x.N++ // one element past the end
				err := c.AllReduceSum(r, x)
				c.Abort() // what a failed rank does, so that the others return
				return err
			}
			return c.AllReduceSum(r, x)
		})
		if errs[0] == nil || !strings.Contains(errs[0].Error(), "memcheck") || !strings.Contains(errs[0].Error(), "runs past the end") {
			t.Errorf("rank 0: %v", errs[0])
		}
		for r := 1; r < n; r++ {
			if errs[r] == nil || !strings.Contains(errs[r].Error(), "closed") && !strings.Contains(errs[r].Error(), "aborted") {
				t.Errorf("rank %d: %v", r, errs[r])
			}
		}
	})

	t.Run("a buffer of another device", func(t *testing.T) {
		var other Tensor
		if err := devs[1].Do(func() error {
			var err error
			other, err = devs[1].Alloc(F32, N)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer devs[1].Do(func() error { devs[1].Free(other); return nil })
		c := fresh(t)
		err := devs[0].Do(func() error { return c.AllReduceSum(0, other) })
		c.Abort()
		if err == nil || !strings.Contains(err.Error(), "belongs to another device") {
			t.Errorf("rank 0 given cuda:1's buffer: %v", err)
		}
	})
}

// BenchmarkNCCLAllReduce: the emulated all-reduce of a 16 MiB f32
// gradient arena across the devices CUDAEMU_DEVICES makes (or the GPUs):
//
//	CUDAEMU_DEVICES=2 SWETUI_TEST_NCCL=2 SWETUI_CUDA_LIBS=$PWD/build/cudaemu \
//	  go test ./model/cuda -run '^$' -bench NCCLAllReduce
func BenchmarkNCCLAllReduce(b *testing.B) {
	n, _ := strconv.Atoi(os.Getenv("SWETUI_TEST_NCCL"))
	if n < 2 {
		b.Skip("SWETUI_TEST_NCCL=n with CUDAEMU_DEVICES=n")
	}
	l := &Loader{ConfigDirs: filepath.SplitList(os.Getenv("SWETUI_CUDA_LIBS"))}
	devs := make([]*CUDADevice, n)
	for i := range devs {
		d, err := OpenCUDA(context.Background(), i, l)
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		devs[i] = d
	}
	comms, err := OpenComms(devs, l)
	if err != nil {
		b.Fatal(err)
	}
	defer comms.Close()
	const N = 4 << 20
	xs := make([]Tensor, n)
	for r, d := range devs {
		if err := d.Do(func() error { xs[r], err = d.Alloc(F32, N); return err }); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(N * 4)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for r, err := range onRanks(devs, func(r int, d *CUDADevice) error { return comms.AllReduceSum(r, xs[r]) }) {
			if err != nil {
				b.Fatalf("rank %d: %v", r, err)
			}
		}
	}
}
