package cuda

import (
	"errors"
	"fmt"
	"sync"
)

// NCCL, NVIDIA's collectives library (libnccl.so.2, which PyTorch's wheels
// carry too), is loaded at run time like the other CUDA libraries, and only
// by a process that drives more than one GPU. Comms holds one communicator
// per device of this process (ncclCommInitAll); each rank's collectives are
// called from inside its device's Do, one goroutine per device, as NCCL
// requires every rank to make each call.

var libNCCL = library{"NCCL (libnccl, NVIDIA's collectives)", []string{"libnccl.so.2", "libnccl.so"}}

type ncclAPI struct {
	path                  string
	ncclGetVersion        func(v *int32) int32
	ncclCommInitAll       func(comms *uintptr, ndev int32, devs *int32) int32
	ncclCommDestroy       func(comm uintptr) int32
	ncclCommAbort         func(comm uintptr) int32
	ncclGetErrorString    func(r int32) string
	ncclGetLastError      func(comm uintptr) string
	ncclAllReduce         func(send, recv uintptr, count uint64, dt, op int32, comm, stream uintptr) int32
	ncclReduceScatter     func(send, recv uintptr, recvcount uint64, dt, op int32, comm, stream uintptr) int32
	ncclAllGather         func(send, recv uintptr, sendcount uint64, dt int32, comm, stream uintptr) int32
	ncclBroadcast         func(send, recv uintptr, count uint64, dt, root int32, comm, stream uintptr) int32
	ncclGroupStart        func() int32
	ncclGroupEnd          func() int32
	ncclCommGetAsyncError func(comm uintptr, r *int32) int32
}

// NCCL's enums (nccl.h).
const (
	ncclInt32    = 2
	ncclFloat32  = 7
	ncclBfloat16 = 9
	ncclSum      = 0
)

var (
	ncclMu   sync.Mutex
	ncclMemo *ncclAPI
)

// loadNCCL opens NCCL from the places the driver was looked for; the
// emulator's driver takes the emulator's NCCL, NVIDIA's driver NVIDIA's.
func loadNCCL(L *libs, l *Loader) (*ncclAPI, error) {
	ncclMu.Lock()
	defer ncclMu.Unlock()
	if ncclMemo != nil {
		return ncclMemo, nil
	}
	h, path, err := l.open(libNCCL)
	if err != nil {
		return nil, err
	}
	if isEmulator(h) != L.Emulated() {
		return nil, fmt.Errorf("cuda: NCCL %s does not go with the driver %s (one is the CUDA emulator, the other is not)", path, L.drv.path)
	}
	n := &ncclAPI{path: path}
	if err := bind(h, "NCCL", path, map[string]any{
		"ncclGetVersion": &n.ncclGetVersion, "ncclCommInitAll": &n.ncclCommInitAll,
		"ncclCommDestroy": &n.ncclCommDestroy, "ncclCommAbort": &n.ncclCommAbort,
		"ncclGetErrorString": &n.ncclGetErrorString, "ncclGetLastError": &n.ncclGetLastError,
		"ncclAllReduce": &n.ncclAllReduce, "ncclReduceScatter": &n.ncclReduceScatter,
		"ncclAllGather": &n.ncclAllGather, "ncclBroadcast": &n.ncclBroadcast,
		"ncclGroupStart": &n.ncclGroupStart, "ncclGroupEnd": &n.ncclGroupEnd,
		"ncclCommGetAsyncError": &n.ncclCommGetAsyncError,
	}); err != nil {
		return nil, err
	}
	ncclMemo = n
	return n, nil
}

// Comms is one NCCL communicator for each device of a process: rank i is
// Devices[i]. Its collectives are NCCL's: every rank calls each one, in the
// same order, with the same sizes.
type Comms struct {
	api     *ncclAPI
	Devices []*CUDADevice
	comms   []uintptr
	version string
	mu      sync.Mutex
	closed  bool
}

// OpenComms makes the communicators of devs (ncclCommInitAll), each
// device once, all opened with the same libraries.
func OpenComms(devs []*CUDADevice, l *Loader) (*Comms, error) {
	if len(devs) == 0 {
		return nil, errors.New("cuda: nccl: no devices")
	}
	L := devs[0].L
	ords := make([]int32, len(devs))
	seen := map[int]bool{}
	for i, d := range devs {
		if d.L != L {
			return nil, fmt.Errorf("cuda: nccl: cuda:%d was opened with other libraries", d.ordinal)
		}
		if seen[d.ordinal] {
			return nil, fmt.Errorf("cuda: nccl: cuda:%d is listed twice", d.ordinal)
		}
		seen[d.ordinal] = true
		ords[i] = d.dev
	}
	api, err := loadNCCL(L, l)
	if err != nil {
		return nil, err
	}
	c := &Comms{api: api, Devices: devs, comms: make([]uintptr, len(devs))}
	var v int32
	if api.ncclGetVersion(&v) == 0 {
		c.version = fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
	}
	// ncclCommInitAll sets each device current itself.
	if r := api.ncclCommInitAll(&c.comms[0], int32(len(devs)), &ords[0]); r != 0 {
		return nil, fmt.Errorf("cuda: ncclCommInitAll(%d devices): %s", len(devs), c.errString(0, r))
	}
	return c, nil
}

// Version is NCCL's, as major.minor.patch.
func (c *Comms) Version() string { return c.version }

// Path is the NCCL library loaded.
func (c *Comms) Path() string { return c.api.path }

// Size is the number of ranks.
func (c *Comms) Size() int { return len(c.comms) }

// errString names NCCL's result with the report of rank's communicator
// (the library's last report once the communicators are gone).
func (c *Comms) errString(rank int, r int32) string {
	msg := fmt.Sprintf("%s (ncclResult %d)", c.api.ncclGetErrorString(r), r)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return msg + ": the communicators were aborted (Abort) or closed during the call"
	}
	if last := c.api.ncclGetLastError(c.comms[rank]); last != "" {
		msg += ": " + last
	}
	return msg
}

func ncclType(dt DType) (int32, error) {
	switch dt {
	case F32:
		return ncclFloat32, nil
	case BF16:
		return ncclBfloat16, nil
	case I32:
		return ncclInt32, nil
	}
	return 0, fmt.Errorf("cuda: nccl: no NCCL type for %v", dt)
}

// call runs one collective of rank on its device's current thread: the
// caller is inside Devices[rank].Do.
func (c *Comms) call(rank int, what string, t Tensor, fn func(dt int32, comm uintptr) int32) error {
	if rank < 0 || rank >= len(c.comms) {
		return fmt.Errorf("cuda: nccl %s: rank %d of %d", what, rank, len(c.comms))
	}
	if t.h != nil {
		return fmt.Errorf("cuda: nccl %s: a tensor of the CPU device", what)
	}
	dt, err := ncclType(t.DT)
	if err != nil {
		return err
	}
	c.mu.Lock()
	comm := c.comms[rank]
	c.mu.Unlock()
	if comm == 0 {
		return fmt.Errorf("cuda: nccl %s: the communicators are closed", what)
	}
	if r := fn(dt, comm); r != 0 {
		return fmt.Errorf("cuda: %s on rank %d (cuda:%d): %s", what, rank, c.Devices[rank].ordinal, c.errString(rank, r))
	}
	return nil
}

// AllReduceSum sums t over the ranks, in place, on every rank.
func (c *Comms) AllReduceSum(rank int, t Tensor) error {
	return c.call(rank, "ncclAllReduce", t, func(dt int32, comm uintptr) int32 {
		return c.api.ncclAllReduce(t.ptr, t.ptr, uint64(t.N), dt, ncclSum, comm, 0)
	})
}

// ReduceScatterSum sums src (Size() equal parts) over the ranks and leaves
// part rank of the sum in dst. dst may be src's part rank (in place).
func (c *Comms) ReduceScatterSum(rank int, dst, src Tensor) error {
	if dst.DT != src.DT || src.N != dst.N*c.Size() {
		return fmt.Errorf("cuda: ncclReduceScatter: %d %v elements into %d %v on %d ranks", src.N, src.DT, dst.N, dst.DT, c.Size())
	}
	return c.call(rank, "ncclReduceScatter", dst, func(dt int32, comm uintptr) int32 {
		return c.api.ncclReduceScatter(src.ptr, dst.ptr, uint64(dst.N), dt, ncclSum, comm, 0)
	})
}

// AllGather concatenates every rank's src, in rank order, into dst on
// every rank. src may be dst's part rank (in place).
func (c *Comms) AllGather(rank int, dst, src Tensor) error {
	if dst.DT != src.DT || dst.N != src.N*c.Size() {
		return fmt.Errorf("cuda: ncclAllGather: %d %v elements into %d %v on %d ranks", src.N, src.DT, dst.N, dst.DT, c.Size())
	}
	return c.call(rank, "ncclAllGather", src, func(dt int32, comm uintptr) int32 {
		return c.api.ncclAllGather(src.ptr, dst.ptr, uint64(src.N), dt, comm, 0)
	})
}

// Broadcast copies root's t into t on every rank.
func (c *Comms) Broadcast(rank int, t Tensor, root int) error {
	return c.call(rank, "ncclBroadcast", t, func(dt int32, comm uintptr) int32 {
		return c.api.ncclBroadcast(t.ptr, t.ptr, uint64(t.N), dt, int32(root), comm, 0)
	})
}

// Group runs fn between ncclGroupStart and ncclGroupEnd: the collectives
// fn calls for several ranks from one thread run together at the end.
func (c *Comms) Group(fn func() error) error {
	if r := c.api.ncclGroupStart(); r != 0 {
		return fmt.Errorf("cuda: ncclGroupStart: %s", c.api.ncclGetErrorString(r))
	}
	err := fn()
	if r := c.api.ncclGroupEnd(); r != 0 && err == nil {
		err = fmt.Errorf("cuda: ncclGroupEnd: %s: %s", c.api.ncclGetErrorString(r), c.api.ncclGetLastError(0))
	}
	return err
}

// Abort ends every communicator now (ncclCommAbort), releasing ranks that
// wait on a collective that another rank will not make: what a rank that
// failed does, so that the others do not hang.
func (c *Comms) Abort() {
	c.release(c.api.ncclCommAbort)
}

// Close destroys the communicators.
func (c *Comms) Close() error {
	c.release(c.api.ncclCommDestroy)
	return nil
}

func (c *Comms) release(fn func(uintptr) int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	for i, h := range c.comms {
		if h != 0 {
			fn(h)
			c.comms[i] = 0
		}
	}
}
