package task

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestTestListForms(t *testing.T) {
	tests := []struct {
		in      string
		want    TestList
		wantErr string
	}{
		{`["a::b", "c d"]`, TestList{"a::b", "c d"}, ""},
		{`"[\"a::b\", \"c d\"]"`, TestList{"a::b", "c d"}, ""},
		{`"[]"`, TestList{}, ""},
		{`""`, nil, ""},
		{`"not a list"`, nil, "not a JSON-encoded list"},
		{`42`, nil, "want a list"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var got TestList
			err := json.Unmarshal([]byte(tt.in), &got)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %#v, %v; want %#v", got, err, tt.want)
			}
		})
	}
}
