package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
)

// A minimal safetensors codec: 8-byte little-endian header size, a JSON
// header {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, then
// the raw little-endian data. We write F32 and read F32, F16, BF16 and F64.

type stEntry struct {
	Dtype   string `json:"dtype"`
	Shape   []int  `json:"shape"`
	Offsets [2]int `json:"data_offsets"`
}

type namedTensor struct {
	name  string
	shape []int
	data  []float32
}

func encodeSafetensors(ts []namedTensor, meta map[string]string) ([]byte, error) {
	header := map[string]any{}
	if len(meta) > 0 {
		header["__metadata__"] = meta
	}
	off := 0
	for _, t := range ts {
		if prod(t.shape) != len(t.data) {
			return nil, fmt.Errorf("safetensors: %s: shape %v does not hold %d values", t.name, t.shape, len(t.data))
		}
		header[t.name] = stEntry{Dtype: "F32", Shape: t.shape, Offsets: [2]int{off, off + 4*len(t.data)}}
		off += 4 * len(t.data)
	}
	h, err := json.Marshal(header)
	if err != nil {
		return nil, fmt.Errorf("safetensors: header: %w", err)
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	var buf bytes.Buffer
	buf.Grow(8 + len(h) + off)
	binary.Write(&buf, binary.LittleEndian, uint64(len(h)))
	buf.Write(h)
	b4 := make([]byte, 4)
	for _, t := range ts {
		for _, v := range t.data {
			binary.LittleEndian.PutUint32(b4, math.Float32bits(v))
			buf.Write(b4)
		}
	}
	return buf.Bytes(), nil
}

type stTensor struct {
	shape []int
	data  []float32
}

func readSafetensors(path string) (map[string]stTensor, map[string]string, error) {
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
	names := make([]string, 0, len(raw))
	for k := range raw {
		names = append(names, k)
	}
	sort.Strings(names)
	out := map[string]stTensor{}
	for _, name := range names {
		var e stEntry
		if err := json.Unmarshal(raw[name], &e); err != nil {
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
		b := make([]byte, hi-lo)
		if _, err := f.ReadAt(b, 8+int64(n)+int64(lo)); err != nil {
			return nil, nil, fmt.Errorf("read safetensors %s: tensor %s: %w", path, name, err)
		}
		d := make([]float32, count)
		for i := range d {
			switch e.Dtype {
			case "F32":
				d[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			case "F64":
				d[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])))
			case "BF16":
				d[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
			case "F16":
				d[i] = f16(binary.LittleEndian.Uint16(b[2*i:]))
			}
		}
		out[name] = stTensor{shape: e.Shape, data: d}
	}
	return out, meta, nil
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
