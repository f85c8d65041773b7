package train

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"
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
	name := fmt.Sprintf("events.out.tfevents.%d.%s", time.Now().Unix(), host)
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return nil, fmt.Errorf("tensorboard: %w", err)
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
