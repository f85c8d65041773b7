package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// maxShown bounds how much of a client's string the server repeats in an
// answer, a log line or the console.
const maxShown = 128

// quote is a client-supplied string as the server repeats it: Go-quoted
// (a newline or an escape sequence shows as \n or \x1b, so it can forge no
// log line and move no cursor), cut to maxShown bytes with the cut said.
func quote(s string) string {
	if len(s) <= maxShown {
		return strconv.Quote(s)
	}
	cut := s[:maxShown]
	for !utf8.ValidString(cut) && len(cut) > maxShown-utf8.UTFMax {
		cut = cut[:len(cut)-1]
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(cut), len(s))
}

// shownBytes bounds a client's text (a patch, an issue) on the console.
const shownBytes = 16 << 10

// clip keeps the first n bytes of s (whole runes) and says how much is
// left out.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := s[:n]
	for !utf8.ValidString(cut) && len(cut) > n-utf8.UTFMax {
		cut = cut[:len(cut)-1]
	}
	return fmt.Sprintf("%s\n... [%d more bytes not shown]\n", cut, len(s)-len(cut))
}

// bodyBudget bounds the bytes of request bodies held at once.
type bodyBudget struct {
	mu          sync.Mutex
	used, limit int64
}

// take reserves n bytes, or reports that they would pass the limit.
func (b *bodyBudget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit {
		return false
	}
	b.used += n
	return true
}

func (b *bodyBudget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

func (b *bodyBudget) held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// errBudget refuses a request whose body would pass serve.inflight_mb.
var errBudget = errors.New("request bodies held")

// readBody reads a request's whole body within the server's limits: at
// most max bytes (413), arriving in time (408: the connection's read
// deadline), as long as its Content-Length says (400).
func readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	var mb *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mb):
		return nil, &requestError{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes (serve.max_body_kb)", mb.Limit)}
	case errors.As(err, &ne) && ne.Timeout():
		// The error names the sockets; the client needs only the cause.
		return nil, &requestError{http.StatusRequestTimeout, "request body not received in time (serve.body_timeout_s)"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, badRequest("request body ended after %d of the %d bytes its Content-Length announced", len(body), r.ContentLength)
	case err != nil:
		return nil, badRequest("request body: %v", err)
	}
	return body, nil
}

// jsonKeys are the keys of struct type t's fields as encoding/json names them.
func jsonKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported():
		case name == "":
			keys = append(keys, f.Name)
		default:
			keys = append(keys, name)
		}
	}
	return keys
}

// decodeStrict reads body into v (a pointer to a struct) as exactly one
// JSON object: its keys are v's, in their spelling (encoding/json alone
// matches them in any case), each at most once (alone, the last of a
// duplicated key wins), and nothing but white space follows it. The error
// names the fault.
func decodeStrict(body []byte, v any) error {
	known := jsonKeys(reflect.TypeOf(v).Elem())
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	switch {
	case err == io.EOF:
		return errors.New("empty body: want a JSON object")
	case err != nil:
		return fmt.Errorf("not JSON: %v", err)
	case tok != json.Delim('{'):
		return fmt.Errorf("want a JSON object, not %s", jsonKind(tok))
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("not JSON: %v", err)
		}
		key := tok.(string) // inside an object, a token before a value is its key
		switch {
		case seen[key]:
			return fmt.Errorf("key %s appears twice", quote(key))
		case !slices.Contains(known, key):
			for _, k := range known {
				if strings.EqualFold(k, key) {
					return fmt.Errorf("unknown key %s: keys are case-sensitive (did you mean %q?)", quote(key), k)
				}
			}
			return fmt.Errorf("unknown key %s (known: %s)", quote(key), strings.Join(known, ", "))
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fmt.Errorf("key %s: not JSON: %v", quote(key), err)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return fmt.Errorf("not JSON: %v", err)
	}
	if tok, err := dec.Token(); err != io.EOF {
		if err != nil {
			return fmt.Errorf("data after the request object: %v", err)
		}
		return fmt.Errorf("data after the request object (%s): send one object", jsonKind(tok))
	}
	strict := json.NewDecoder(bytes.NewReader(body))
	strict.DisallowUnknownFields()
	return strict.Decode(v)
}

// jsonKind names a JSON token for an error.
func jsonKind(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		if t == '{' {
			return "another object"
		}
		return "an array"
	case string:
		return "a string"
	case nil:
		return "null"
	case bool:
		return "a boolean"
	default:
		return "a number"
	}
}
