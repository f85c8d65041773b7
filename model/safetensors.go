package model

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
)

// A minimal safetensors codec: 8-byte little-endian header size, a JSON
// header {name: {dtype, shape, data_offsets}, "__metadata__": {...}} padded
// with spaces to a multiple of 8, then the raw little-endian data, the
// tensors back to back in header-offset order. We write F32 and BF16 and
// read F32, F16, BF16 and F64.

type stEntry struct {
	Dtype   string `json:"dtype"`
	Shape   []int  `json:"shape"`
	Offsets [2]int `json:"data_offsets"`
}

// Dtype is the element type Save writes weights in, by its safetensors
// name.
type Dtype string

// The dtypes Save writes.
const (
	F32  Dtype = "F32"
	BF16 Dtype = "BF16"
)

// size is the bytes of one value.
func (d Dtype) size() int {
	if d == BF16 {
		return 2
	}
	return 4
}

// torch is the dtype's name in config.json's torch_dtype.
func (d Dtype) torch() string {
	if d == BF16 {
		return "bfloat16"
	}
	return "float32"
}

// bf16 rounds f to bfloat16, to nearest even as torch does; a NaN stays a
// NaN (quieted, so rounding cannot carry it into the infinities).
func bf16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// stOut is one tensor to write: its name, its shape in the file and each,
// which hands its values to emit in file order, a chunk at a time, so that
// no copy of the whole model is built.
type stOut struct {
	name  string
	shape []int
	each  func(emit func([]float32) error) error
}

// namedTensor is a tensor held whole in memory.
type namedTensor struct {
	name  string
	shape []int
	data  []float32
}

func (t namedTensor) out() stOut {
	return stOut{t.name, t.shape, func(emit func([]float32) error) error { return emit(t.data) }}
}

// encodeSafetensors is writeSafetensors into memory, for small files.
func encodeSafetensors(ts []namedTensor, meta map[string]string) ([]byte, error) {
	outs := make([]stOut, len(ts))
	for i, t := range ts {
		if prod(t.shape) != len(t.data) {
			return nil, fmt.Errorf("safetensors: %s: shape %v does not hold %d values", t.name, t.shape, len(t.data))
		}
		outs[i] = t.out()
	}
	var buf bytes.Buffer
	if err := writeSafetensors(&buf, F32, outs, meta); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeSafetensors streams ts to w in dtype, in the order given.
func writeSafetensors(w io.Writer, dtype Dtype, ts []stOut, meta map[string]string) error {
	header := map[string]any{}
	if len(meta) > 0 {
		header["__metadata__"] = meta
	}
	off := 0
	for _, t := range ts {
		n := prod(t.shape) * dtype.size()
		header[t.name] = stEntry{Dtype: string(dtype), Shape: t.shape, Offsets: [2]int{off, off + n}}
		off += n
	}
	h, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("safetensors: header: %w", err)
	}
	for len(h)%8 != 0 { // the data then starts 8-byte aligned
		h = append(h, ' ')
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	if _, err := bw.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(h)))); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	if _, err := bw.Write(h); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	const piece = 1 << 14 // values encoded at a time
	buf := make([]byte, 0, piece*4)
	for _, t := range ts {
		count := 0
		err := t.each(func(xs []float32) error {
			count += len(xs)
			for len(xs) > 0 {
				n := min(len(xs), piece)
				buf = buf[:0]
				if dtype == BF16 {
					for _, x := range xs[:n] {
						buf = binary.LittleEndian.AppendUint16(buf, bf16(x))
					}
				} else {
					for _, x := range xs[:n] {
						buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
					}
				}
				if _, err := bw.Write(buf); err != nil {
					return err
				}
				xs = xs[n:]
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("safetensors: %s: %w", t.name, err)
		}
		if count != prod(t.shape) {
			return fmt.Errorf("safetensors: %s: shape %v does not hold %d values", t.name, t.shape, count)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

// stTensor is one tensor of a safetensors file: its shape and where its
// values are (read eagerly by readSafetensors, on demand by read).
type stTensor struct {
	shape []int
	data  []float32 // the values, once read
	path  string
	dtype string
	at    int64 // the first byte of its data in path
}

// read fills dst (prod(shape) values) from the file, converting to
// float32; scratch is a reusable buffer (nil: one is made).
func (t stTensor) read(dst []float32, scratch *[]byte) error {
	if t.data != nil {
		copy(dst, t.data)
		return nil
	}
	f, err := os.Open(t.path)
	if err != nil {
		return err
	}
	defer f.Close()
	return t.readFrom(f, dst, 0, scratch)
}

// readFrom fills dst with the values from element from on.
func (t stTensor) readFrom(f io.ReaderAt, dst []float32, from int, scratch *[]byte) error {
	if from < 0 || from+len(dst) > prod(t.shape) {
		return fmt.Errorf("values [%d, %d) of a %d-value tensor", from, from+len(dst), prod(t.shape))
	}
	size := map[string]int{"F32": 4, "F16": 2, "BF16": 2, "F64": 8}[t.dtype]
	const piece = 1 << 16 // values converted at a time: no second copy of a large tensor
	if scratch == nil {
		scratch = new([]byte)
	}
	b := slices.Grow((*scratch)[:0], piece*size)[:min(len(dst), piece)*size]
	*scratch = b
	for lo := 0; lo < len(dst); lo += piece {
		d := dst[lo:min(lo+piece, len(dst))]
		chunk := b[:len(d)*size]
		if _, err := f.ReadAt(chunk, t.at+int64((from+lo)*size)); err != nil {
			return err
		}
		for i := range d {
			switch t.dtype {
			case "F32":
				d[i] = math.Float32frombits(binary.LittleEndian.Uint32(chunk[4*i:]))
			case "F64":
				d[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(chunk[8*i:])))
			case "BF16":
				d[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(chunk[2*i:])) << 16)
			case "F16":
				d[i] = f16(binary.LittleEndian.Uint16(chunk[2*i:]))
			}
		}
	}
	return nil
}

// indexSafetensors reads a file's header: its tensors (not their values)
// and metadata.
func indexSafetensors(path string) (map[string]stTensor, map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read safetensors: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("read safetensors %s: %w", path, err)
	}
	var n uint64
	if err := binary.Read(f, binary.LittleEndian, &n); err != nil {
		return nil, nil, fmt.Errorf("read safetensors %s: header size: %w", path, err)
	}
	if n > uint64(st.Size())-8 || n > 100<<20 {
		return nil, nil, fmt.Errorf("read safetensors %s: header size %d exceeds the file", path, n)
	}
	hb := make([]byte, n)
	if _, err := io.ReadFull(f, hb); err != nil {
		return nil, nil, fmt.Errorf("read safetensors %s: header: %w", path, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hb, &raw); err != nil {
		return nil, nil, fmt.Errorf("read safetensors %s: header: %w", path, err)
	}
	meta := map[string]string{}
	if m, ok := raw["__metadata__"]; ok {
		if err := json.Unmarshal(m, &meta); err != nil {
			return nil, nil, fmt.Errorf("read safetensors %s: metadata: %w", path, err)
		}
		delete(raw, "__metadata__")
	}
	dataLen := st.Size() - 8 - int64(n)
	out := map[string]stTensor{}
	for name, r := range raw {
		var e stEntry
		if err := json.Unmarshal(r, &e); err != nil {
			return nil, nil, fmt.Errorf("read safetensors %s: tensor %s: %w", path, name, err)
		}
		size := map[string]int{"F32": 4, "F16": 2, "BF16": 2, "F64": 8}[e.Dtype]
		if size == 0 {
			return nil, nil, fmt.Errorf("read safetensors %s: tensor %s: dtype %s not supported", path, name, e.Dtype)
		}
		count := prod(e.Shape)
		lo, hi := e.Offsets[0], e.Offsets[1]
		if lo < 0 || hi < lo || int64(hi) > dataLen || hi-lo != count*size {
			return nil, nil, fmt.Errorf("read safetensors %s: tensor %s: offsets %v do not fit shape %v of %s", path, name, e.Offsets, e.Shape, e.Dtype)
		}
		out[name] = stTensor{shape: e.Shape, path: path, dtype: e.Dtype, at: 8 + int64(n) + int64(lo)}
	}
	return out, meta, nil
}

// readSafetensors reads a whole (small) file: every tensor's values.
func readSafetensors(path string) (map[string]stTensor, map[string]string, error) {
	ts, meta, err := indexSafetensors(path)
	if err != nil {
		return nil, nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read safetensors: %w", err)
	}
	defer f.Close()
	names := make([]string, 0, len(ts))
	for k := range ts {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		t := ts[name]
		d := make([]float32, prod(t.shape))
		if err := t.readFrom(f, d, 0, nil); err != nil {
			return nil, nil, fmt.Errorf("read safetensors %s: tensor %s: %w", path, name, err)
		}
		t.data = d
		ts[name] = t
	}
	return ts, meta, nil
}

// f16 converts an IEEE half to float32.
func f16(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := int(h>>10) & 0x1f
	frac := uint32(h & 0x3ff)
	switch {
	case exp == 0 && frac == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		return float32(math.Copysign(float64(frac)*math.Pow(2, -24), float64(int32(sign)|1)))
	case exp == 31:
		return math.Float32frombits(sign | 0x7f800000 | frac<<13)
	}
	return math.Float32frombits(sign | uint32(exp-15+127)<<23 | frac<<13)
}
