package task

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/swetui/swetui/config"
)

// MiniSource is the data.source value that selects the embedded suite.
const MiniSource = "mini"

// Split names.
const (
	SplitTrain = "train"
	SplitTest  = "test"
	SplitAll   = "all"
)

// Load returns the instances cfg selects: the embedded suite (whose tests
// run in sandbox.image) or a dataset file (data.source), the split, the include/exclude lists and
// data.train_limit, in dataset order. Every instance is validated and its
// execution fields filled from the spec table. A dataset file is streamed:
// only the selected instances are kept.
func Load(ctx context.Context, cfg config.Config) ([]Instance, error) {
	d := cfg.Data
	sel, err := newSelector(d)
	if err != nil {
		return nil, err
	}
	if d.Source == MiniSource {
		suite, err := GenerateMini(d.MiniSeed, d.MiniTasks, d.TestFrac, cfg.Sandbox.Image)
		if err != nil {
			return nil, err
		}
		for _, t := range suite.Tasks {
			if err := sel.offer(t.Instance, ""); err != nil {
				return nil, err
			}
		}
	} else {
		err := scan(ctx, d.Source, func(in Instance, where string) error {
			if err := in.Validate(); err != nil {
				return err
			}
			if in.Split == "" {
				in.Split = SplitTrain
				if IsTest(in.InstanceID, d.TestFrac) {
					in.Split = SplitTest
				}
			}
			in.ApplySpec()
			in.applyImageDefault(cfg.Prepare)
			return sel.offer(in, where)
		})
		if err != nil {
			return nil, err
		}
	}
	return sel.result(d.Source)
}

// Scan streams the instances of a dataset file (.jsonl, .json, .parquet) to
// fn in file order, one at a time, as decoded (not validated, spec not
// applied). An error names the file and the line or row.
func Scan(ctx context.Context, path string, fn func(Instance) error) error {
	return scan(ctx, path, func(in Instance, _ string) error { return fn(in) })
}

// IsTest reports whether an instance id falls in the held-out test split for
// a test fraction. It hashes the id, so the split of a task never changes
// when tasks are added to or removed from a dataset.
func IsTest(instanceID string, fraction float64) bool {
	h := fnv.New64a()
	h.Write([]byte(instanceID))
	return float64(h.Sum64()>>11)/(1<<53) < fraction
}

// selector applies the split, include/exclude lists, the train limit and
// the duplicate check to a stream of instances.
type selector struct {
	split    string
	limit    int
	include  map[string]bool
	exclude  map[string]bool
	seen     map[string]string // instance id -> where it was first seen
	found    map[string]bool   // included ids met in the stream
	selected []Instance
}

func newSelector(d config.Data) (*selector, error) {
	switch d.Split {
	case SplitTrain, SplitTest, SplitAll:
	default:
		return nil, fmt.Errorf("load: data.split = %q, want train, test or all", d.Split)
	}
	s := &selector{split: d.Split, include: set(d.Include), exclude: set(d.Exclude),
		seen: map[string]string{}, found: map[string]bool{}}
	// train_limit bounds what is trained on; the held-out split is never cut.
	if d.Split != SplitTest {
		s.limit = d.TrainLimit
	}
	return s, nil
}

func set(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

func (s *selector) offer(in Instance, where string) error {
	if first, dup := s.seen[in.InstanceID]; dup {
		if first != "" {
			return fmt.Errorf("duplicate instance_id %q (first at %s)", in.InstanceID, first)
		}
		return fmt.Errorf("duplicate instance_id %q", in.InstanceID)
	}
	s.seen[in.InstanceID] = where
	if len(s.include) > 0 {
		if !s.include[in.InstanceID] {
			return nil
		}
		s.found[in.InstanceID] = true
	}
	if s.exclude[in.InstanceID] {
		return nil
	}
	if s.split != SplitAll && in.Split != s.split {
		return nil
	}
	if s.limit > 0 && len(s.selected) >= s.limit {
		return nil
	}
	s.selected = append(s.selected, in)
	return nil
}

func (s *selector) result(source string) ([]Instance, error) {
	var missing []string
	for id := range s.include {
		if !s.found[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("load %s: data.include names instance ids not in the dataset: %s",
			source, strings.Join(missing, ", "))
	}
	return s.selected, nil
}

// scan decodes a dataset file record by record; where is "file:line" or
// "file: row N". Errors from fn are wrapped with where.
func scan(ctx context.Context, path string, fn func(in Instance, where string) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("load dataset: %w", err)
	}
	defer f.Close()
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".jsonl", ".ndjson":
		return scanJSONL(ctx, path, f, fn)
	case ".json":
		// Hugging Face's to_json writes JSON lines under a .json name.
		br := bufio.NewReaderSize(f, 1<<16)
		skipBOM(br)
		first, err := firstByte(br)
		if err != nil {
			return fmt.Errorf("load %s: %w", path, err)
		}
		if first == '[' {
			return scanJSONArray(ctx, path, br, fn)
		}
		return scanJSONL(ctx, path, br, fn)
	case ".parquet":
		return scanParquet(ctx, path, f, fn)
	default:
		return fmt.Errorf("load %s: unknown dataset format %q (want .jsonl, .json or .parquet)", path, ext)
	}
}

// BOM is the UTF-8 byte-order mark, which JSON does not allow and which
// dataset and prediction files sometimes start with: it is skipped.
var BOM = []byte("\xef\xbb\xbf")

func skipBOM(br *bufio.Reader) {
	if b, err := br.Peek(len(BOM)); err == nil && bytes.Equal(b, BOM) {
		_, _ = br.Discard(len(BOM))
	}
}

func firstByte(br *bufio.Reader) (byte, error) {
	for i := 1; ; i++ {
		b, err := br.Peek(i)
		if err == io.EOF {
			return 0, errors.New("empty file")
		}
		if err != nil {
			return 0, err
		}
		c := b[i-1]
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return c, nil
		}
	}
}

func scanJSONL(ctx context.Context, path string, r io.Reader, fn func(Instance, string) error) error {
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(r, 1<<16)
	}
	for line := 1; ; line++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		// ReadBytes has no line-length limit: problem statements can be long.
		b, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return fmt.Errorf("load %s:%d: %w", path, line, err)
		}
		// A byte-order mark (editors on Windows write one at the start of
		// a file; concatenated files carry them further down) is no JSON.
		if t := bytes.TrimSpace(bytes.TrimPrefix(b, BOM)); len(t) > 0 {
			where := fmt.Sprintf("%s:%d", path, line)
			in, derr := decodeRecord(t)
			if derr != nil {
				return fmt.Errorf("load %s: %w", where, derr)
			}
			if ferr := fn(in, where); ferr != nil {
				return fmt.Errorf("load %s: %w", where, ferr)
			}
		}
		if err == io.EOF {
			return nil
		}
	}
}

func scanJSONArray(ctx context.Context, path string, r io.Reader, fn func(Instance, string) error) error {
	lt := &lineTracker{r: r}
	dec := json.NewDecoder(lt)
	// fail reports a decoding error at the line where it is: the decoder's
	// own offsets do not count the bytes it skips between values, so the
	// element is decoded again on its own from the bytes the tracker kept.
	fail := func(record int, start int64, err error) error {
		at := fmt.Sprintf("%s:%d", path, lt.lineAt(start))
		if record > 0 {
			var se *json.SyntaxError
			if rerr := json.NewDecoder(bytes.NewReader(lt.from(start))).Decode(new(json.RawMessage)); errors.As(rerr, &se) {
				at = fmt.Sprintf("%s:%d (record %d)", path, lt.lineAt(start+se.Offset-1), record)
			} else {
				at = fmt.Sprintf("%s:%d (record %d)", path, lt.lineAt(start), record)
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			err = errors.New("unexpected end of file: the JSON array is not closed")
		}
		return fmt.Errorf("load %s: %w", at, err)
	}
	if _, err := dec.Token(); err != nil { // the opening '['
		return fail(0, 0, err)
	}
	end := dec.InputOffset()
	for record := 1; ; record++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		more := dec.More()
		start := lt.valueStart(end)
		if !more {
			break
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fail(record, start, err)
		}
		end = dec.InputOffset()
		where := fmt.Sprintf("%s:%d (record %d)", path, lt.lineAt(start), record)
		lt.forget(end)
		in, err := decodeRecord(raw)
		if err != nil {
			return fmt.Errorf("load %s: %w", where, err)
		}
		if err := fn(in, where); err != nil {
			return fmt.Errorf("load %s: %w", where, err)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing ']'
		return fail(0, lt.valueStart(end), err)
	}
	return nil
}

// lineTracker keeps the bytes the JSON decoder has read but not yet
// finished with, so that an offset can be turned into a line number and a
// failed element read again. Memory stays bounded by one element plus the
// decoder's read-ahead.
type lineTracker struct {
	r      io.Reader
	base   int64  // stream offset of buf[0]
	buf    []byte // bytes from base on
	linesB int    // newlines before base
}

func (t *lineTracker) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.buf = append(t.buf, p[:n]...)
	return n, err
}

func (t *lineTracker) index(off int64) int {
	return int(min(max(off-t.base, 0), int64(len(t.buf))))
}

// lineAt returns the 1-based line of a byte offset at or after base.
func (t *lineTracker) lineAt(off int64) int {
	return t.linesB + bytes.Count(t.buf[:t.index(off)], []byte{'\n'}) + 1
}

// forget drops the bytes before off.
func (t *lineTracker) forget(off int64) {
	i := t.index(off)
	t.linesB += bytes.Count(t.buf[:i], []byte{'\n'})
	t.buf = append(t.buf[:0], t.buf[i:]...)
	t.base += int64(i)
}

// valueStart is the offset of the next value after off: past whitespace
// and the comma between array elements.
func (t *lineTracker) valueStart(off int64) int64 {
	i := t.index(off)
	for i < len(t.buf) && strings.IndexByte(" \t\r\n,", t.buf[i]) >= 0 {
		i++
	}
	return t.base + int64(i)
}

// from returns the kept bytes from off on.
func (t *lineTracker) from(off int64) []byte { return t.buf[t.index(off):] }

func scanParquet(ctx context.Context, path string, f *os.File, fn func(Instance, string) error) (err error) {
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("load %s: %w", path, err)
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return fmt.Errorf("load %s: not a parquet file: %w", path, err)
	}
	defer func() {
		// parquet-go panics on some corrupt pages; report them as errors.
		if p := recover(); p != nil {
			err = fmt.Errorf("load %s: corrupt parquet file: %v", path, p)
		}
	}()
	cols := pf.Schema().Columns()
	repeated := make([]bool, len(cols))
	for i, c := range cols {
		leaf, _ := pf.Schema().Lookup(c...)
		repeated[i] = leaf.MaxRepetitionLevel > 0
	}
	rd := parquet.NewReader(pf)
	defer rd.Close()
	buf := make([]parquet.Row, 64)
	row := 0
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, rerr := rd.ReadRows(buf)
		for _, r := range buf[:n] {
			row++
			where := fmt.Sprintf("%s: row %d", path, row)
			in, err := decodeParquetRow(r, cols, repeated)
			if err != nil {
				return fmt.Errorf("load %s: %w", where, err)
			}
			if err := fn(in, where); err != nil {
				return fmt.Errorf("load %s: %w", where, err)
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return fmt.Errorf("load %s: row %d: %w", path, row+1, rerr)
		}
	}
}

// decodeParquetRow maps a row's top-level columns to record fields: scalar
// leaves become strings, repeated leaves (list<string>) become lists.
func decodeParquetRow(r parquet.Row, cols [][]string, repeated []bool) (Instance, error) {
	scalars := map[string]string{}
	lists := map[string][]string{}
	for _, v := range r {
		c := v.Column()
		if c < 0 || c >= len(cols) {
			continue
		}
		name := cols[c][0]
		if repeated[c] {
			if _, ok := lists[name]; !ok {
				lists[name] = []string{}
			}
			if !v.IsNull() {
				lists[name] = append(lists[name], valueString(v))
			}
			continue
		}
		if !v.IsNull() {
			scalars[name] = valueString(v)
		}
	}
	raw := make(map[string]json.RawMessage, len(scalars)+len(lists))
	for k, s := range scalars {
		raw[k], _ = json.Marshal(s)
	}
	for k, l := range lists {
		raw[k], _ = json.Marshal(l)
	}
	return decodeFields(raw)
}

func valueString(v parquet.Value) string {
	switch v.Kind() {
	case parquet.ByteArray, parquet.FixedLenByteArray:
		return string(v.ByteArray())
	default:
		return v.String()
	}
}
