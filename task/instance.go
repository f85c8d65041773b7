package task

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"unicode"

	"unicode/utf8"
)

// DefaultWorkdir is where an instance's repository sits inside its image.
const DefaultWorkdir = "/testbed"

// Instance is one task in SWE-bench's schema, plus optional execution fields
// that say how to run its tests where the per-repository spec table does not.
type Instance struct {
	InstanceID             string   `json:"instance_id"`
	Repo                   string   `json:"repo"`
	BaseCommit             string   `json:"base_commit"`
	ProblemStatement       string   `json:"problem_statement"`
	HintsText              string   `json:"hints_text,omitempty"`
	Patch                  string   `json:"patch"`
	TestPatch              string   `json:"test_patch"`
	FailToPass             TestList `json:"FAIL_TO_PASS"`
	PassToPass             TestList `json:"PASS_TO_PASS"`
	Version                string   `json:"version,omitempty"`
	EnvironmentSetupCommit string   `json:"environment_setup_commit,omitempty"`
	CreatedAt              string   `json:"created_at,omitempty"`
	// Text is a ready-made prompt (SWE-bench's bm25_13K/27K and oracle
	// datasets carry one), shown as is with data.prompt = "text".
	Text string `json:"text,omitempty"`

	// Execution fields (optional).
	Image          string   `json:"image,omitempty"`
	Workdir        string   `json:"workdir,omitempty"`
	TestCmd        string   `json:"test_cmd,omitempty"`
	TestDirectives []string `json:"test_directives,omitempty"`
	LogParser      string   `json:"log_parser,omitempty"`
	EvalScript     string   `json:"eval_script,omitempty"`
	// Setup runs in the test process before test_cmd: environment
	// activation (source, export). It must leave the patched files alone:
	// an evaluation whose setup changes them runs no tests and is an
	// infrastructure failure that says so.
	Setup string `json:"setup,omitempty"`
	// RepoSetup runs in the repository after the checkout and before the
	// model patch: repository setup (generated files, submodules, a
	// checkout of its own), what the patches then apply to.
	RepoSetup string `json:"repo_setup,omitempty"`

	// Split is "train" or "test" where the dataset says so; otherwise the
	// loader assigns one from a hash of the instance id (see IsTest).
	Split string `json:"split,omitempty"`

	// CheckoutBase: the evaluation checks out BaseCommit before the model
	// patch (the image may hold the repository at another commit).
	CheckoutBase bool `json:"-"`
	// Derived names what swetui filled in rather than the dataset
	// (test_cmd, log_parser, checkout, test_directives, image), for
	// `swetui prepare --dry-run`.
	Derived []string `json:"-"`
}

// TestList is a list of test ids. In JSON it is either a list of strings or a
// string holding a JSON-encoded list, as on the Hugging Face hub.
type TestList []string

// UnmarshalJSON accepts ["a", "b"] and "[\"a\", \"b\"]".
func (l *TestList) UnmarshalJSON(data []byte) error {
	var list []string
	if err := json.Unmarshal(data, &list); err == nil {
		*l = list
		return nil
	}
	var encoded string
	if err := json.Unmarshal(data, &encoded); err != nil {
		return fmt.Errorf("want a list of test ids or a JSON-encoded list, got %.40s", data)
	}
	if encoded == "" {
		*l = nil
		return nil
	}
	if err := json.Unmarshal([]byte(encoded), &list); err != nil {
		return fmt.Errorf("string is not a JSON-encoded list of test ids: %.40q", encoded)
	}
	*l = list
	return nil
}

// Validate checks the fields every use of an instance needs and names the
// instance and the first missing field.
func (in *Instance) Validate() error {
	if err := CheckInstanceID(in.InstanceID); err != nil {
		return err
	}
	for _, f := range []struct{ name, value string }{
		{"repo", in.Repo},
		{"base_commit", in.BaseCommit},
	} {
		if strings.TrimSpace(f.value) == "" {
			return fmt.Errorf("instance %s: missing field %q", in.InstanceID, f.name)
		}
	}
	if in.TestPatch == "" && in.EvalScript == "" {
		return fmt.Errorf("instance %s: missing field \"test_patch\" (or an eval_script)", in.InstanceID)
	}
	if len(in.FailToPass) == 0 {
		return fmt.Errorf("instance %s: field \"FAIL_TO_PASS\" is empty", in.InstanceID)
	}
	switch in.Split {
	case "", "train", "test":
	default:
		return fmt.Errorf("instance %s: field \"split\" is %q, want \"train\" or \"test\"", in.InstanceID, in.Split)
	}
	return nil
}

// MaxInstanceIDBytes bounds an instance id: it names an image, a
// container's labels and log lines.
const MaxInstanceIDBytes = 256

// CheckInstanceID refuses an instance id that is empty, longer than
// MaxInstanceIDBytes, not UTF-8, or holds white space or control
// characters (a newline would forge a log line, an escape sequence move a
// terminal's cursor). The error quotes at most the id's first bytes.
func CheckInstanceID(id string) error {
	shown := id
	if len(shown) > 64 {
		shown = shown[:64]
	}
	switch {
	case id == "":
		return errors.New("missing field \"instance_id\"")
	case len(id) > MaxInstanceIDBytes:
		return fmt.Errorf("instance_id %q... is %d bytes, over %d", shown, len(id), MaxInstanceIDBytes)
	case !utf8.ValidString(id):
		return fmt.Errorf("instance_id %q is not UTF-8", shown)
	case strings.IndexFunc(id, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0:
		return fmt.Errorf("instance_id %q holds white space or control characters", shown)
	}
	return nil
}

// WorkdirOrDefault is the repository's folder inside the image.
func (in *Instance) WorkdirOrDefault() string {
	if in.Workdir != "" {
		return in.Workdir
	}
	return DefaultWorkdir
}

// ImageName is the image the instance's tests run in: its own image field, or
// the official SWE-bench instance image name.
func (in *Instance) ImageName() string {
	if in.Image != "" {
		return in.Image
	}
	return "sweb.eval.x86_64." + in.InstanceID
}
