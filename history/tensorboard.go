package history

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/swetui/swetui/internal/durable"
)

// TensorBoard writes scalar summaries in TensorBoard's event-file format: TFRecord
// framing (u64 length, masked CRC-32C of the length, data, masked CRC-32C of the
// data) around Event protobufs, the first carrying file_version "brain.Event:2".
// No maintained Go writer exists, and the few protobuf fields are simple enough
// to encode by hand.
type TensorBoard struct {
	f *os.File
	w *bufio.Writer
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maskedCRC is TFRecord's masked CRC-32C: rotate right by 15, add a constant.
func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return ((c >> 15) | (c << 17)) + 0xa282ead8
}

// NewTensorBoard creates an event file in dir.
func NewTensorBoard(dir string) (*TensorBoard, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tensorboard: %w", err)
	}
	host, _ := os.Hostname()
	// A run restarted within the second it was killed in must not
	// truncate its predecessor's file: the pid and O_EXCL keep names apart.
	var f *os.File
	for n := 0; ; n++ {
		name := fmt.Sprintf("events.out.tfevents.%d.%s.%d.%d", time.Now().Unix(), host, os.Getpid(), n)
		var err error
		f, err = os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || n >= 100 {
			return nil, fmt.Errorf("tensorboard: %w", err)
		}
	}
	tb := &TensorBoard{f: f, w: bufio.NewWriter(f)}
	ev := appendDouble(nil, 1, float64(time.Now().UnixNano())/1e9)
	ev = appendBytes(ev, 3, []byte("brain.Event:2"))
	if err := tb.record(ev); err != nil {
		f.Close()
		return nil, err
	}
	return tb, tb.w.Flush()
}

// Scalars writes one event holding every tag → value at step.
func (tb *TensorBoard) Scalars(step int, wall time.Time, values map[string]float64) error {
	tags := make([]string, 0, len(values))
	for k := range values {
		tags = append(tags, k)
	}
	sort.Strings(tags)
	var summary []byte
	for _, tag := range tags {
		v := appendBytes(nil, 1, []byte(tag))
		v = appendFloat(v, 2, float32(values[tag]))
		summary = appendBytes(summary, 1, v)
	}
	ev := appendDouble(nil, 1, float64(wall.UnixNano())/1e9)
	ev = appendVarintField(ev, 2, uint64(step))
	ev = appendBytes(ev, 5, summary)
	if err := tb.record(ev); err != nil {
		return err
	}
	return tb.w.Flush()
}

// Close flushes and closes the file.
func (tb *TensorBoard) Close() error {
	if err := tb.w.Flush(); err != nil {
		tb.f.Close()
		return fmt.Errorf("tensorboard: %w", err)
	}
	return tb.f.Close()
}

func (tb *TensorBoard) record(data []byte) error {
	var hdr [12]byte
	binary.LittleEndian.PutUint64(hdr[:8], uint64(len(data)))
	binary.LittleEndian.PutUint32(hdr[8:], maskedCRC(hdr[:8]))
	var tail [4]byte
	binary.LittleEndian.PutUint32(tail[:], maskedCRC(data))
	for _, b := range [][]byte{hdr[:], data, tail[:]} {
		if _, err := tb.w.Write(b); err != nil {
			return fmt.Errorf("tensorboard: %w", err)
		}
	}
	return nil
}

// Protobuf wire format helpers: tag = field<<3 | wire type.
func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendVarintField(b []byte, field int, v uint64) []byte {
	return appendVarint(appendVarint(b, uint64(field)<<3|0), v)
}

func appendDouble(b []byte, field int, v float64) []byte {
	b = appendVarint(b, uint64(field)<<3|1)
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
}

func appendFloat(b []byte, field int, v float32) []byte {
	b = appendVarint(b, uint64(field)<<3|5)
	return binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
}

func appendBytes(b []byte, field int, v []byte) []byte {
	b = appendVarint(b, uint64(field)<<3|2)
	b = appendVarint(b, uint64(len(v)))
	return append(b, v...)
}

// RepairTensorBoard rewrites the event files in dir without a torn last
// record and without the events keep rejects (the steps a resumed run is
// about to write again), each file atomically. keep sees an event's scalar
// tags and step; the file_version record is always kept.
func RepairTensorBoard(dir string, keep func(tags []string, step int64) bool) error {
	files, err := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	if err != nil {
		return fmt.Errorf("tensorboard: %w", err)
	}
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("tensorboard: %w", err)
		}
		var out []byte
		changed := false
		for rest := data; len(rest) > 0; {
			rec, n, ok := readRecord(rest)
			if !ok {
				changed = true // torn or damaged: the rest is lost
				break
			}
			tags, step := eventTagsAndStep(rec)
			if len(tags) > 0 && !keep(tags, step) {
				changed = true
			} else {
				out = append(out, rest[:n]...)
			}
			rest = rest[n:]
		}
		if changed {
			if err := durable.ReplaceFile(path, out); err != nil {
				return fmt.Errorf("tensorboard: %w", err)
			}
		}
	}
	return nil
}

// readRecord reads one TFRecord frame: its data and the frame's length.
func readRecord(b []byte) (data []byte, n int, ok bool) {
	if len(b) < 12 {
		return nil, 0, false
	}
	size := binary.LittleEndian.Uint64(b[:8])
	if binary.LittleEndian.Uint32(b[8:12]) != maskedCRC(b[:8]) || size > uint64(len(b)-16) {
		return nil, 0, false
	}
	data = b[12 : 12+size]
	if binary.LittleEndian.Uint32(b[12+size:16+size]) != maskedCRC(data) {
		return nil, 0, false
	}
	return data, int(16 + size), true
}

// eventTagsAndStep decodes an Event's step (field 2) and its summary's
// value tags (field 5 → 1 → 1): the few fields Scalars writes.
func eventTagsAndStep(ev []byte) (tags []string, step int64) {
	for _, f := range protoFields(ev) {
		switch f.num {
		case 2:
			step = int64(f.varint)
		case 5:
			for _, v := range protoFields(f.bytes) {
				if v.num != 1 {
					continue
				}
				for _, t := range protoFields(v.bytes) {
					if t.num == 1 {
						tags = append(tags, string(t.bytes))
					}
				}
			}
		}
	}
	return tags, step
}

type protoField struct {
	num    int
	varint uint64
	bytes  []byte
}

// protoFields splits a protobuf message into its fields (varint, 64-bit,
// length-delimited and 32-bit wire types); it stops at anything malformed.
func protoFields(b []byte) []protoField {
	var out []protoField
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			return out
		}
		b = b[n:]
		f := protoField{num: int(key >> 3)}
		switch key & 7 {
		case 0:
			v, n := binary.Uvarint(b)
			if n <= 0 {
				return out
			}
			f.varint, b = v, b[n:]
		case 1:
			if len(b) < 8 {
				return out
			}
			b = b[8:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return out
			}
			f.bytes, b = b[n:n+int(l)], b[n+int(l):]
		case 5:
			if len(b) < 4 {
				return out
			}
			b = b[4:]
		default:
			return out
		}
		out = append(out, f)
	}
	return out
}

// ReadTensorBoard returns, for every scalar tag in dir's event files, the
// steps it was written at, in file order (a reader for tests and tools; a
// torn last record ends a file).
func ReadTensorBoard(dir string) (map[string][]int64, error) {
	files, err := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	if err != nil {
		return nil, fmt.Errorf("tensorboard: %w", err)
	}
	sort.Strings(files)
	out := map[string][]int64{}
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("tensorboard: %w", err)
		}
		for rest := data; len(rest) > 0; {
			rec, n, ok := readRecord(rest)
			if !ok {
				break
			}
			tags, step := eventTagsAndStep(rec)
			for _, tag := range tags {
				out[tag] = append(out[tag], step)
			}
			rest = rest[n:]
		}
	}
	return out, nil
}
