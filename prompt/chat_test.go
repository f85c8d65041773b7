package prompt

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeVocab holds a model's special tokens at their real ids.
type fakeVocab map[string]int

func (v fakeVocab) SpecialID(s string) (int, bool) { id, ok := v[s]; return id, ok }

func (v fakeVocab) Specials() []string {
	var out []string
	for s := range v {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func (v fakeVocab) Token(id int) string {
	for s, i := range v {
		if i == id {
			return s
		}
	}
	return ""
}

func (v fakeVocab) IsSpecial(id int) bool { return v.Token(id) != "" }

var (
	qwenVocab  = fakeVocab{"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645}
	llamaVocab = fakeVocab{"<|begin_of_text|>": 128000, "<|end_of_text|>": 128001, "<|start_header_id|>": 128006,
		"<|end_header_id|>": 128007, "<|eom_id|>": 128008, "<|eot_id|>": 128009, "<|python_tag|>": 128010}
)

// chatFixtures are the real models' chat templates in testdata/chat, each
// with its special tokens, end of turn and stop tokens.
var chatFixtures = []struct {
	dir       string
	vocab     fakeVocab
	end       string
	stopTexts []string
	stopIDs   []int
}{
	{"qwen2.5-coder-7b-instruct", qwenVocab, "<|im_end|>", []string{"<|im_end|>", "<|endoftext|>"}, []int{151645, 151643}},
	{"meta-llama-3-8b-instruct", llamaVocab, "<|eot_id|>", []string{"<|eot_id|>", "<|end_of_text|>"}, []int{128009, 128001}},
	{"llama-3.1-8b-instruct", llamaVocab, "<|eot_id|>", []string{"<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"}, []int{128009, 128001, 128008}},
}

// renderedCase is one conversation of testdata/chat/*/rendered.json, as
// transformers renders it (testdata/chat/render.py).
type renderedCase struct {
	Name                string           `json:"name"`
	AddGenerationPrompt bool             `json:"add_generation_prompt"`
	Messages            []map[string]any `json:"messages"`
	Want                string           `json:"want"`
}

func readRendered(t *testing.T, dir string) []renderedCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "rendered.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []renderedCase
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	return cases
}

func TestChatTemplatesRenderAsTransformers(t *testing.T) {
	for _, fx := range chatFixtures {
		dir := filepath.Join("testdata", "chat", fx.dir)
		f, err := LoadChatFormat(dir, fx.vocab)
		if err != nil {
			t.Fatalf("%s: %v", fx.dir, err)
		}
		for _, c := range readRendered(t, dir) {
			got, err := f.render(c.Messages, c.AddGenerationPrompt)
			if err != nil {
				t.Errorf("%s %s: %v", fx.dir, c.Name, err)
				continue
			}
			if got != c.Want {
				t.Errorf("%s %s:\n got %q\nwant %q", fx.dir, c.Name, got, c.Want)
			}
			if c.Name != "prompt" {
				continue
			}
			sys, user := c.Messages[0]["content"].(string), c.Messages[1]["content"].(string)
			if p, err := f.Render(sys, user); err != nil || p != c.Want {
				t.Errorf("%s: Render = %q, %v; want %q", fx.dir, p, err, c.Want)
			}
		}
	}
}

func TestChatFormatEndsAndStops(t *testing.T) {
	for _, fx := range chatFixtures {
		dir := filepath.Join("testdata", "chat", fx.dir)
		f, err := LoadChatFormat(dir, fx.vocab)
		if err != nil {
			t.Fatalf("%s: %v", fx.dir, err)
		}
		if f.EndOfTurn() != fx.end || !slices.Equal(f.StopTexts(), fx.stopTexts) || !slices.Equal(f.StopTokens(fx.vocab), fx.stopIDs) {
			t.Errorf("%s: end %q stops %q %v; want %q %q %v", fx.dir, f.EndOfTurn(), f.StopTexts(), f.StopTokens(fx.vocab), fx.end, fx.stopTexts, fx.stopIDs)
		}
		// The warm start's target is the reply as the template closes it.
		var reply renderedCase
		for _, c := range readRendered(t, dir) {
			if c.Name == "reply" {
				reply = c
			}
		}
		prompt, err := f.Render(reply.Messages[0]["content"].(string), reply.Messages[1]["content"].(string))
		if err != nil {
			t.Fatal(err)
		}
		gold := "```diff\n" + strings.TrimPrefix(reply.Messages[2]["content"].(string), "```diff\n")
		if got := prompt + strings.TrimSuffix(gold, "```") + "```" + f.EndOfTurn(); strings.TrimRight(reply.Want, "\n") != got {
			t.Errorf("%s: prompt + reply + end of turn\n%q\nwant the rendered conversation\n%q", fx.dir, got, reply.Want)
		}
		for _, stop := range fx.stopTexts {
			if got := f.CompletionText(identityTokenizer{"```diff\nx\n```" + stop}, nil); got != "```diff\nx\n```" {
				t.Errorf("%s: completion ending %q trimmed to %q", fx.dir, stop, got)
			}
		}
	}
}

func TestChatMLIsTheDefault(t *testing.T) {
	var f ChatFormat
	files := []CodeFile{{Path: "a/b.py", Text: "x = 1\n\n"}}
	got, err := f.RenderPrompt("  issue text\n", files)
	want := "<|im_start|>system\n" + System + "<|im_end|>\n<|im_start|>user\nissue text\n\n[a/b.py]\nx = 1<|im_end|>\n<|im_start|>assistant\n"
	if err != nil || got != want {
		t.Fatalf("prompt %q, %v\nwant %q", got, err, want)
	}
	if g := f.GoldCompletion("--- a\n+++ b"); g != "```diff\n--- a\n+++ b\n```<|im_end|>" {
		t.Fatalf("gold %q", g)
	}
	if !slices.Equal(f.StopTexts(), []string{ImEnd, EndOfText}) || f.EndOfTurn() != ImEnd || f.Templated() {
		t.Fatalf("stops %q end %q", f.StopTexts(), f.EndOfTurn())
	}
	// A tokenizer without EndOfText stops at ImEnd alone, as before.
	if ids := f.StopTokens(fakeVocab{ImStart: 1, ImEnd: 2}); !slices.Equal(ids, []int{2}) {
		t.Fatalf("stop ids %v", ids)
	}
}

func TestLoadChatFormatVariants(t *testing.T) {
	qwen := `{"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"`
	tests := []struct {
		name       string
		files      map[string]string
		vocab      fakeVocab
		wantErr    string
		wantEnd    string
		wantStops  []string
		wantPrompt string
	}{
		{name: "list of named templates, eos as an object, one eos id",
			files: map[string]string{
				"tokenizer_config.json":  `{"chat_template": [{"name": "tool_use", "template": "x"}, {"name": "default", "template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}</s>{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"}], "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": {"content": "</s>"}}`,
				"generation_config.json": `{"eos_token_id": 2}`},
			vocab: fakeVocab{"<s>": 1, "</s>": 2}, wantEnd: "</s>", wantStops: []string{"</s>"},
			wantPrompt: "<s>[system]S</s>[user]U</s>[assistant]"},
		{name: "chat_template.jinja wins over tokenizer_config.json",
			files: map[string]string{"tokenizer_config.json": qwen + `, "eos_token": "<|endoftext|>"}`,
				"chat_template.jinja": "{% for m in messages %}<{{ m.role }}>{{ m.content }}<|end|>\n{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"},
			vocab: fakeVocab{"<|end|>": 7, "<|endoftext|>": 8}, wantEnd: "<|end|>", wantStops: []string{"<|end|>", "<|endoftext|>"},
			wantPrompt: "<system>S<|end|>\n<user>U<|end|>\n<assistant>"},
		{name: "a template that writes a generation prompt anyway: the first special after the reply",
			files: map[string]string{"tokenizer_config.json": `{"chat_template": "{% for m in messages %}<h>{{ m.role }}</h>{{ m.content }}<|eot_id|>{% endfor %}<h>assistant</h>"}`},
			vocab: fakeVocab{"<h>": 1, "</h>": 2, "<|eot_id|>": 3}, wantEnd: "<|eot_id|>", wantStops: []string{"<|eot_id|>"},
			wantPrompt: "<h>system</h>S<|eot_id|><h>user</h>U<|eot_id|><h>assistant</h>"},
		{name: "no template, ChatML specials: ChatML",
			files: map[string]string{"tokenizer_config.json": `{"eos_token": "<|endoftext|>"}`, "generation_config.json": `{"eos_token_id": [3, 1]}`},
			vocab: fakeVocab{"<|endoftext|>": 1, "<|im_start|>": 2, "<|im_end|>": 3}, wantEnd: ImEnd, wantStops: []string{ImEnd, EndOfText},
			wantPrompt: "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"},
		{name: "no template, no ChatML specials", files: map[string]string{"tokenizer_config.json": `{"eos_token": "</s>"}`},
			vocab: fakeVocab{"</s>": 2, ImEnd: 3}, wantErr: "lacks the special tokens <|im_start|> that swetui's ChatML default writes"},
		{name: "no tokenizer_config.json, no ChatML specials", vocab: fakeVocab{"</s>": 2},
			wantErr: "lacks the special tokens <|im_start|> and <|im_end|>"},
		{name: "eos id that is not a special token",
			files: map[string]string{"tokenizer_config.json": qwen + `}`, "generation_config.json": `{"eos_token_id": [5]}`},
			vocab: qwenVocab, wantErr: "eos_token_id 5 is not a special token"},
		{name: "no default among named templates",
			files: map[string]string{"tokenizer_config.json": `{"chat_template": [{"name": "rag", "template": "x"}]}`},
			vocab: qwenVocab, wantErr: "no chat_template named default among rag"},
		{name: "template that raises",
			files: map[string]string{"tokenizer_config.json": `{"chat_template": "{{ raise_exception('System role not supported') }}"}`},
			vocab: qwenVocab, wantErr: "System role not supported"},
		{name: "plain-text end of turn and no eos_token",
			files: map[string]string{"tokenizer_config.json": `{"chat_template": "{% for m in messages %}{{ m.content }}\n### end\n{% endfor %}"}`},
			vocab: qwenVocab, wantErr: `ends a reply with "\n### end", not a special token`},
	}
	for _, tt := range tests {
		dir := t.TempDir()
		for name, body := range tt.files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		f, err := LoadChatFormat(dir, tt.vocab)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), dir) {
				t.Errorf("%s: error %v, want one naming %s and saying %q", tt.name, err, dir, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		p, err := f.Render("S", "U")
		if err != nil || p != tt.wantPrompt || f.EndOfTurn() != tt.wantEnd || !slices.Equal(f.StopTexts(), tt.wantStops) {
			t.Errorf("%s: prompt %q (%v) end %q stops %q\nwant prompt %q end %q stops %q", tt.name, p, err, f.EndOfTurn(), f.StopTexts(),
				tt.wantPrompt, tt.wantEnd, tt.wantStops)
		}
	}
}

// Whitespace beside other tags, raw blocks, comments and signs come out as
// Python's Jinja2 writes them (testdata/chat/whitespace.json).
func TestTemplateWhitespaceAsJinja2(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "chat", "whitespace.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct{ Template, Want string }
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		tmpl, err := compileTemplate(c.Template)
		if err != nil {
			t.Errorf("%q: %v", c.Template, err)
			continue
		}
		got, err := tmpl.Render(map[string]any{"messages": []any{map[string]any{"role": "user", "content": " X "}}})
		if err != nil || got != c.Want {
			t.Errorf("%q:\n got %q (%v)\nwant %q", c.Template, got, err, c.Want)
		}
	}
}

// The observation turn is what the template writes between a reply's end
// of turn and the next generation prompt, in every fixture's format: the
// whole conversation rendered equals the pieces put together.
func TestObservationTurn(t *testing.T) {
	chatml := ChatFormat{}
	seg, err := chatml.ObservationTurn("exit code 0\nok")
	if err != nil || seg != "\n<|im_start|>user\nexit code 0\nok<|im_end|>\n<|im_start|>assistant\n" {
		t.Errorf("ChatML: %q %v", seg, err)
	}
	for _, fx := range chatFixtures {
		t.Run(fx.dir, func(t *testing.T) {
			f, err := LoadChatFormat(filepath.Join("testdata", "chat", fx.dir), fx.vocab)
			if err != nil {
				t.Fatal(err)
			}
			seg, role, err := f.observationTurn("exit code 1\nFAILED test_x")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: the observation in role %s: %q", fx.dir, role, seg)
			if !strings.Contains(seg, "exit code 1\nFAILED test_x") || strings.HasPrefix(seg, f.EndOfTurn()) {
				t.Errorf("segment %q", seg)
			}
			p, err := f.RenderAgentPrompt("the bug", "/testbed", []string{"pkg/a.py", "pkg/b.py"})
			if err != nil {
				t.Fatal(err)
			}
			// prompt + reply + end of turn + segment is the template's own
			// rendering of the conversation with the generation prompt.
			whole, err := f.render([]map[string]any{{"role": "system", "content": AgentSystem}, {"role": "user", "content": AgentUserTurn("the bug", "/testbed", []string{"pkg/a.py", "pkg/b.py"})},
				{"role": "assistant", "content": "```bash\nls\n```"}, {"role": role, "content": "exit code 1\nFAILED test_x"}}, true)
			if err != nil {
				t.Fatal(err)
			}
			if got := p + "```bash\nls\n```" + f.EndOfTurn() + seg; got != whole {
				t.Errorf("pieces:\n%q\ntemplate:\n%q", got, whole)
			}
		})
	}
}
