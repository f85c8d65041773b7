package history

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestCRC32CCheckValue(t *testing.T) {
	if got := crc32.Checksum([]byte("123456789"), castagnoli); got != 0xe3069283 {
		t.Fatalf("CRC-32C = %#x, want 0xe3069283", got)
	}
}

// The file reads back as TFRecords whose CRCs check, the first event carries
// the version, and a scalar event carries step, tag and value where the
// protobuf schema puts them.
func TestTensorBoardFile(t *testing.T) {
	dir := t.TempDir()
	tb, err := NewTensorBoard(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.Scalars(7, time.Unix(100, 0), map[string]float64{"reward/mean": 0.25}); err != nil {
		t.Fatal(err)
	}
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	if len(files) != 1 {
		t.Fatalf("files %v", files)
	}
	data, _ := os.ReadFile(files[0])
	var records [][]byte
	for len(data) > 0 {
		n := binary.LittleEndian.Uint64(data[:8])
		if maskedCRC(data[:8]) != binary.LittleEndian.Uint32(data[8:12]) {
			t.Fatal("length CRC mismatch")
		}
		rec := data[12 : 12+n]
		if maskedCRC(rec) != binary.LittleEndian.Uint32(data[12+n:16+n]) {
			t.Fatal("data CRC mismatch")
		}
		records = append(records, rec)
		data = data[16+n:]
	}
	if len(records) != 2 {
		t.Fatalf("%d records, want 2", len(records))
	}
	// event.Event 1: field 1 (double, 9 bytes), then field 3 (string "brain.Event:2").
	if want := "brain.Event:2"; string(records[0][9+2:]) != want || records[0][9] != 3<<3|2 {
		t.Fatalf("first event %q", records[0])
	}
	// event.Event 2: wall_time 100.0, step 7, summary{value{tag, simple_value}}.
	ev := records[1]
	if ev[0] != 1<<3|1 || math.Float64frombits(binary.LittleEndian.Uint64(ev[1:9])) != 100 {
		t.Fatalf("wall time: % x", ev[:9])
	}
	if ev[9] != 2<<3 || ev[10] != 7 {
		t.Fatalf("step: % x", ev[9:11])
	}
	tag := "reward/mean"
	// summary(5) len, value(1) len, tag(1) len "reward/mean", simple_value(2, fixed32)
	want := []byte{5<<3 | 2, byte(2 + 2 + len(tag) + 5), 1<<3 | 2, byte(2 + len(tag) + 5), 1<<3 | 2, byte(len(tag))}
	want = append(want, tag...)
	want = append(want, 2<<3|5)
	want = binary.LittleEndian.AppendUint32(want, math.Float32bits(0.25))
	if string(ev[11:]) != string(want) {
		t.Fatalf("summary\n got % x\nwant % x", ev[11:], want)
	}
}

func TestRepairTensorBoardCutsAndMendsTornRecords(t *testing.T) {
	dir := t.TempDir()
	tb, err := NewTensorBoard(dir)
	if err != nil {
		t.Fatal(err)
	}
	for step := 1; step <= 4; step++ {
		tb.Scalars(step, time.Now(), map[string]float64{"reward/mean": float64(step)})
		tb.Scalars(step*10, time.Now(), map[string]float64{"sft/loss": 1})
	}
	tb.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	f, _ := os.OpenFile(files[0], os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte{1, 2, 3}) // a record torn by kill -9
	f.Close()
	cut := Cut{GRPOStep: 2, SFTStep: 30}
	if err := RepairTensorBoard(dir, cut.keepScalars); err != nil {
		t.Fatal(err)
	}
	got, err := ReadTensorBoard(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got["reward/mean"], []int64{1, 2}) || !reflect.DeepEqual(got["sft/loss"], []int64{10, 20, 30}) {
		t.Fatalf("after the cut: %v", got)
	}
	data, _ := os.ReadFile(files[0])
	if _, n, ok := readRecord(data); !ok || n == 0 {
		t.Fatal("repaired file does not start with a record")
	}
}

func TestNewTensorBoardNeverTruncatesAnother(t *testing.T) {
	dir := t.TempDir()
	first, err := NewTensorBoard(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Scalars(1, time.Now(), map[string]float64{"sft/loss": 2}); err != nil {
		t.Fatal(err)
	}
	first.Close()
	second, err := NewTensorBoard(dir) // same process, same second: a new file
	if err != nil {
		t.Fatal(err)
	}
	second.Close()
	tb, err := ReadTensorBoard(dir)
	if err != nil || len(tb["sft/loss"]) != 1 {
		t.Fatalf("the first file's scalar is gone after a second writer opened: %v %v", tb, err)
	}
}
